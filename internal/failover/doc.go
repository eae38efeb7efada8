// Package failover holds the replica failover tests (docs/delivery.md, docs/replicas.md): two or three
// bridges run as child processes of the built cmd/bridge binary, against real nats-servers (one, or a
// 3-node cluster with R3 streams) and the upstream simulator over loopback. The tests kill, stop, pause and
// cut off the leader, kill the NATS node that leads the events stream, roll an update and restart the
// cursor, and then check the delivery promise on what JetStream and the simulator hold: every event
// exactly once, every event stored under the fence marker of the leader in office, every report accepted
// upstream once.
//
// The package has no code besides this comment; run it with
//
//	go test -race -count=1 ./internal/failover/
//
// (-short skips the slowest parts). FAILOVER_LOG_DIR, when set, names a directory that receives every
// bridge's full log of every run. The bridge binary is built with -race when the tests run with it;
// FAILOVER_BRIDGE_RACE=0 or 1 overrides that.
package failover
