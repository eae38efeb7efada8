// Package deploy holds the tests of the deployment files: the Dockerfile and docker-compose.yml at the
// top of the repository, and this directory's NATS configurations (nats/), alert rules and Grafana
// dashboard (monitoring/), Kubernetes manifests (kubernetes/) and Helm chart (helm/). Each file is read
// by its own tool's parser (compose-go, BuildKit's Dockerfile parser, kustomize, Helm, nats-server,
// Prometheus's rule parser), and what it sets is checked against the bridge: configuration variables,
// commands, ports, paths and metric names.
//
// It is a module of its own, so that those parsers stay out of the bridge's module graph; the
// repository's go test ./... does not enter it. Run its tests with:
//
//	cd deploy && go test ./...
//
// Files generated from others (the chart's values schema for config, the copies of monitoring/ in the
// chart and the kustomize component) are rewritten with go test -run 'TestHelmValuesSchema|TestMonitoringCopies' -update.
package deploy
