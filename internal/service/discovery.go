package service

import (
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// The service speaks NATS micro's protocol (ADR-32: endpoints in a queue group, discovery on
// $SRV.PING, $SRV.INFO and $SRV.STATS, errors in the Nats-Service-Error headers) with micro's own types,
// but not through micro.AddService: micro answers every discovery request on whatever reply subject it
// names, with no hook to refuse one, and the bridge's connection may publish on its events, fence and
// lease subjects. A caller could make it write a PING answer into the lease key. Here every answer,
// discovery included, goes through the service's reply check first.

// discovery answers the discovery requests of one service instance.
type discovery struct {
	identity micro.ServiceIdentity
	// answer publishes the reply to m, after the service's reply check; it reports whether it did.
	answer func(m *nats.Msg, verb string, data []byte) bool
	info   func() micro.Info
	stats  func() micro.Stats
}

// DiscoverySubjects returns the nine discovery subjects the service instance id answers: each verb for
// all services, for the service's Name, and for the instance.
func DiscoverySubjects(id string) ([]string, error) {
	var out []string
	err := controlSubjects(Name, id, func(_ micro.Verb, subj string) error {
		out = append(out, subj)
		return nil
	})
	return out, err
}

// controlSubjects calls f with every discovery subject of the instance id of service name, and its verb.
func controlSubjects(name, id string, f func(verb micro.Verb, subj string) error) error {
	for _, verb := range []micro.Verb{micro.PingVerb, micro.InfoVerb, micro.StatsVerb} {
		for _, scope := range [][2]string{{"", ""}, {name, ""}, {name, id}} {
			subj, err := micro.ControlSubject(verb, scope[0], scope[1])
			if err == nil {
				err = f(verb, subj)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// The limits of each discovery subscription: the requests the client holds while the handler answers the
// ones before. A discovery request is a few bytes and its answer is quick, so a flood beyond them is
// dropped by the client instead of held in memory: with nats.go's defaults (512k messages, 64 MB of
// payload, which a flood of one-byte requests never reaches) an outside review drove the bridge past
// 600 MB with 600,000 requests from a caller allowed discovery.
const (
	discoveryPendingMsgs  = 1024
	discoveryPendingBytes = 1 << 20
)

// subscribe subscribes the nine discovery subjects (DiscoverySubjects).
func (d *discovery) subscribe(nc *nats.Conn) ([]*nats.Subscription, error) {
	var subs []*nats.Subscription
	err := controlSubjects(d.identity.Name, d.identity.ID, func(verb micro.Verb, subj string) error {
		sub, err := nc.Subscribe(subj, func(m *nats.Msg) { d.handle(verb, m) })
		if err == nil {
			err = sub.SetPendingLimits(discoveryPendingMsgs, discoveryPendingBytes)
		}
		if err != nil {
			return fmt.Errorf("subscribing %s: %w", subj, err)
		}
		subs = append(subs, sub)
		return nil
	})
	return subs, err
}

func (d *discovery) handle(verb micro.Verb, m *nats.Msg) {
	var v any
	switch verb {
	case micro.PingVerb:
		v = micro.Ping{ServiceIdentity: d.identity, Type: micro.PingResponseType}
	case micro.InfoVerb:
		v = d.info()
	default:
		v = d.stats()
	}
	data, err := json.Marshal(v)
	if err != nil { // the types are micro's own, of strings, numbers and raw JSON
		panic(err)
	}
	d.answer(m, verb.String(), data)
}
