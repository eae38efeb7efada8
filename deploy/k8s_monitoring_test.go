package deploy_test

// Tests of the Kubernetes add-ons that the Helm chart and the kustomize components both offer: the
// ServiceMonitor, the PrometheusRule, the Grafana dashboard's ConfigMap and the NetworkPolicy. The alert
// rules and the dashboard have one source, deploy/monitoring; the chart and the monitoring component hold
// copies of it (neither Helm nor kustomize reads a file outside its own directory), which
// TestMonitoringCopies keeps identical.

import (
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// monitoringComponent is the kustomize component of the monitoring objects.
const monitoringComponent = k8sRoot + "/components/monitoring"

// dashboardKey is the key of the dashboard in its ConfigMap (the file's name, as kustomize's
// configMapGenerator names it).
const dashboardKey = "grafana-dashboard.json"

// prometheusRuleManifest is the kustomize component's PrometheusRule: the rules file as its spec (a
// PrometheusRule's spec is a rules file's groups), comments and all.
func prometheusRuleManifest(rules string) string {
	var b strings.Builder
	b.WriteString(`# Generated from deploy/monitoring/prometheus-rules.yml, which is the file to edit, by
#   cd deploy && go test -run TestMonitoringCopies -update
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: tracking-bridge
  labels:
    app.kubernetes.io/name: tracking-bridge
    app.kubernetes.io/component: bridge
spec:
`)
	for line := range strings.Lines(rules) {
		if strings.TrimSpace(line) != "" {
			b.WriteString("  ")
		}
		b.WriteString(line)
	}
	return b.String()
}

// TestMonitoringCopies: the chart's files/ and the monitoring component hold deploy/monitoring's alert
// rules and dashboard byte for byte (the component's rules inside a PrometheusRule). Run with -update to
// rewrite them from deploy/monitoring.
func TestMonitoringCopies(t *testing.T) {
	rules, dashboard := readRepo(t, rulesFile), readRepo(t, dashboardFile)
	for file, want := range map[string]string{
		chartDir + "/files/prometheus-rules.yml":     rules,
		chartDir + "/files/grafana-dashboard.json":   dashboard,
		monitoringComponent + "/" + dashboardKey:     dashboard,
		monitoringComponent + "/prometheusrule.yaml": prometheusRuleManifest(rules),
	} {
		if *update {
			if err := os.WriteFile(repoPath(file), []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got, err := os.ReadFile(repoPath(file)); err != nil || string(got) != want {
			t.Errorf("%s is not generated from deploy/monitoring (%v); rewrite it with: cd deploy && go test -run TestMonitoringCopies -update", file, err)
		}
	}
}

// rule is an alerting or recording rule as both Prometheus's rule files and PrometheusRules hold it.
type rule struct {
	Group, Alert, Record, Expr string
	For, KeepFiringFor         model.Duration
	Labels, Annotations        map[string]string
}

// sourceRules returns deploy/monitoring's rules, read by Prometheus's own parser.
func sourceRules(t *testing.T) []rule {
	t.Helper()
	groups, errs := rulefmt.ParseFile(repoPath(rulesFile), false,
		model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 || groups == nil {
		t.Fatalf("%s: %v", rulesFile, errs)
	}
	var out []rule
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			out = append(out, rule{Group: g.Name, Alert: r.Alert, Record: r.Record, Expr: r.Expr,
				For: r.For, KeepFiringFor: r.KeepFiringFor, Labels: r.Labels, Annotations: r.Annotations})
		}
	}
	return out
}

// rulesJob is the job every series of the alert rules is selected by: what the ServiceMonitor must name
// the scrapes of the bridge.
func rulesJob(t *testing.T) string {
	t.Helper()
	jobs := map[string]bool{}
	for _, m := range regexp.MustCompile(`job="([^"]*)"`).FindAllStringSubmatch(readRepo(t, rulesFile), -1) {
		jobs[m[1]] = true
	}
	if len(jobs) != 1 {
		t.Fatalf("%s selects the jobs %v; want one", rulesFile, jobs)
	}
	for j := range jobs {
		return j
	}
	return ""
}

// checkAddOns checks the add-ons app has (a chart's render or a kustomization's): the ServiceMonitor
// scrapes the Service's HTTP port under the job the rules query, the PrometheusRule holds exactly the
// rules of deploy/monitoring, the dashboard's ConfigMap holds its dashboard for Grafana's sidecar, and
// the NetworkPolicy lets in the HTTP port and out DNS, NATS and the upstream.
func checkAddOns(t *testing.T, where string, app *k8sApp) {
	t.Helper()
	podLabels := app.deployment.Spec.Template.Labels
	env := appEnv(t, app)

	if sm := app.serviceMonitor; sm != nil {
		if !subset(sm.Spec.Selector.MatchLabels, app.service.Labels) || len(sm.Spec.Selector.MatchExpressions) > 0 {
			t.Errorf("%s: the ServiceMonitor's selector %v does not select the Service %v", where, sm.Spec.Selector, app.service.Labels)
		}
		if job := app.service.Labels[sm.Spec.JobLabel]; sm.Spec.JobLabel == "" || job != rulesJob(t) {
			t.Errorf("%s: the ServiceMonitor's jobLabel %q gives the job %q; the rules and the dashboard query job %q",
				where, sm.Spec.JobLabel, job, rulesJob(t))
		}
		if len(sm.Spec.Endpoints) != 1 {
			t.Fatalf("%s: the ServiceMonitor has %d endpoints, want one", where, len(sm.Spec.Endpoints))
		}
		ep := sm.Spec.Endpoints[0]
		if ep.Path != "/metrics" ||
			!slices.ContainsFunc(app.service.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
			t.Errorf("%s: the ServiceMonitor scrapes path %q on port %q, want /metrics on a named port of the Service", where, ep.Path, ep.Port)
		}
	}

	if pr := app.prometheusRule; pr != nil {
		var got []rule
		for _, g := range pr.Spec.Groups {
			for _, r := range g.Rules {
				got = append(got, rule{Group: g.Name, Alert: r.Alert, Record: r.Record, Expr: r.Expr.String(),
					For: promDuration(t, r.For), KeepFiringFor: promDuration(t, (*monitoringv1.Duration)(r.KeepFiringFor)),
					Labels: r.Labels, Annotations: r.Annotations})
			}
		}
		if d := cmp.Diff(sourceRules(t), got); d != "" {
			t.Errorf("%s: the PrometheusRule does not hold the rules of %s (-file +PrometheusRule):\n%s", where, rulesFile, d)
		}
	}

	dashboards := 0
	for _, cm := range app.configMaps {
		d, ok := cm.Data[dashboardKey]
		if !ok {
			continue
		}
		dashboards++
		if d != readRepo(t, dashboardFile) {
			t.Errorf("%s: ConfigMap %s does not hold %s as it is", where, cm.Name, dashboardFile)
		}
		if cm.Labels["grafana_dashboard"] != "1" {
			t.Errorf("%s: ConfigMap %s lacks the label grafana_dashboard: \"1\" that Grafana's sidecar looks for", where, cm.Name)
		}
	}
	if dashboards > 1 {
		t.Errorf("%s: %d dashboard ConfigMaps", where, dashboards)
	}

	if np := app.networkPolicy; np != nil {
		if !subset(np.Spec.PodSelector.MatchLabels, podLabels) || len(np.Spec.PodSelector.MatchExpressions) > 0 {
			t.Errorf("%s: the NetworkPolicy's podSelector %v does not select the pods %v", where, np.Spec.PodSelector, podLabels)
		}
		if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) {
			t.Errorf("%s: the NetworkPolicy's policyTypes are %v, want Ingress and Egress", where, np.Spec.PolicyTypes)
		}
		// In: the HTTP port and nothing else.
		httpPort := app.deployment.Spec.Template.Spec.Containers[0].Ports[0]
		for _, r := range np.Spec.Ingress {
			if len(r.Ports) == 0 {
				t.Errorf("%s: the NetworkPolicy lets in every port", where)
			}
			for _, p := range r.Ports {
				if p.Port == nil || (p.Port.String() != httpPort.Name && p.Port.String() != fmt.Sprint(httpPort.ContainerPort)) {
					t.Errorf("%s: the NetworkPolicy lets in port %v, which is not the HTTP port", where, p.Port)
				}
			}
		}
		if len(np.Spec.Ingress) == 0 {
			t.Errorf("%s: the NetworkPolicy lets nothing in: no scrape, no /status", where)
		}
		// From the scrapers only: every rule names its sources, and none of them is every pod.
		for _, r := range np.Spec.Ingress {
			if len(r.From) == 0 {
				t.Errorf("%s: the NetworkPolicy lets any source reach the HTTP port", where)
			}
			for _, peer := range r.From {
				if peerAdmitsAnyPod(peer) {
					t.Errorf("%s: the NetworkPolicy lets every pod reach the HTTP port (%+v)", where, peer)
				}
			}
		}
		// Out: DNS, every NATS server's port and the upstream's.
		out := func(port int, proto corev1.Protocol) bool {
			return slices.ContainsFunc(np.Spec.Egress, func(r networkingv1.NetworkPolicyEgressRule) bool {
				return slices.ContainsFunc(r.Ports, func(p networkingv1.NetworkPolicyPort) bool {
					return p.Port != nil && p.Port.Type == intstr.Int && p.Port.IntValue() == port &&
						(p.Protocol == nil && proto == corev1.ProtocolTCP || p.Protocol != nil && *p.Protocol == proto)
				})
			})
		}
		want := map[string]int{"DNS": 53}
		for _, u := range strings.Split(env["BRIDGE_NATS_URL"], ",") {
			want["NATS server "+u] = urlPort(t, u, 4222)
		}
		for _, k := range []string{"BRIDGE_UPSTREAM_URL", "BRIDGE_TOKEN_URL"} {
			want[k+" "+env[k]] = urlPort(t, env[k], 443)
		}
		for what, port := range want {
			if !out(port, corev1.ProtocolTCP) {
				t.Errorf("%s: the NetworkPolicy does not let out TCP port %d (%s)", where, port, what)
			}
		}
		if !out(53, corev1.ProtocolUDP) {
			t.Errorf("%s: the NetworkPolicy does not let out DNS (UDP port 53)", where)
		}
	}
}

// peerAdmitsAnyPod reports whether a NetworkPolicy peer lets in every pod of the cluster, or of the
// bridge's own namespace, which applications may share: an ipBlock of every address, or neither a pod
// selector nor a namespace selector with a requirement.
func peerAdmitsAnyPod(p networkingv1.NetworkPolicyPeer) bool {
	if p.IPBlock != nil {
		return p.IPBlock.CIDR == "0.0.0.0/0" || p.IPBlock.CIDR == "::/0"
	}
	empty := func(s *metav1.LabelSelector) bool {
		return s == nil || len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0
	}
	return empty(p.PodSelector) && empty(p.NamespaceSelector)
}

// policyAdmits reports whether the NetworkPolicy np lets a pod with podLabels, in a namespace with
// nsLabels (a namespace of its own, not the policy's), reach port on the bridge's pods, as the API
// defines a rule: any of its ports and any of its peers (no peers: any source; a peer's namespace
// selector alone: every pod of those namespaces; its pod selector alone: the policy's namespace).
func policyAdmits(t *testing.T, np *networkingv1.NetworkPolicy, port string, podLabels, nsLabels map[string]string) bool {
	t.Helper()
	matches := func(sel *metav1.LabelSelector, l map[string]string) bool {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			t.Fatalf("NetworkPolicy %s: selector %v: %v", np.Name, sel, err)
		}
		return s.Matches(labels.Set(l))
	}
	for _, r := range np.Spec.Ingress {
		if len(r.Ports) > 0 && !slices.ContainsFunc(r.Ports, func(p networkingv1.NetworkPolicyPort) bool {
			return p.Port != nil && p.Port.String() == port
		}) {
			continue
		}
		if len(r.From) == 0 {
			return true
		}
		for _, peer := range r.From {
			if peer.IPBlock != nil || peer.NamespaceSelector == nil {
				continue // an address, or the policy's own namespace
			}
			if matches(peer.NamespaceSelector, nsLabels) && (peer.PodSelector == nil || matches(peer.PodSelector, podLabels)) {
				return true
			}
		}
	}
	return false
}

// TestNetworkPolicyScrapersOnly: the NetworkPolicy that the chart renders by default, and the one of the
// kustomize component (in the example overlay), let Prometheus's pods in any namespace reach the HTTP port
// (the Prometheus Operator's, kube-prometheus-stack's and the prometheus chart's label them
// app.kubernetes.io/name: prometheus) and nothing else that runs in pods: not another pod of the
// monitoring namespace, not an application beside the bridge. The chart's ingressFrom names another
// scraper instead.
func TestNetworkPolicyScrapersOnly(t *testing.T) {
	chartDefault, _ := chartRender(t, "defaults", "", "tracking")
	chartAlloy, _ := chartRender(t, "alloy", `
networkPolicy:
  ingressFrom:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}
      podSelector: {matchLabels: {app.kubernetes.io/name: alloy}}
`, "tracking")
	monitoring := map[string]string{"kubernetes.io/metadata.name": "monitoring"}
	tracking := map[string]string{"kubernetes.io/metadata.name": "tracking"}
	prometheus := map[string]string{"app.kubernetes.io/name": "prometheus", "app.kubernetes.io/instance": "k8s"}
	alloy := map[string]string{"app.kubernetes.io/name": "alloy"}
	other := map[string]string{"app": "orders-service"}
	for _, c := range []struct {
		where string
		app   *k8sApp
		// the pods (by labels, in a namespace) that may reach the port, and those that may not
		in, out []struct{ pod, ns map[string]string }
	}{
		{"the chart's defaults", chartDefault,
			[]struct{ pod, ns map[string]string }{{prometheus, monitoring}, {prometheus, tracking}},
			[]struct{ pod, ns map[string]string }{{other, tracking}, {other, monitoring}, {alloy, monitoring}}},
		{k8sRoot + "/overlays/example", kustomize(t, k8sRoot+"/overlays/example"),
			[]struct{ pod, ns map[string]string }{{prometheus, monitoring}},
			[]struct{ pod, ns map[string]string }{{other, tracking}, {alloy, monitoring}}},
		{"the chart with another scraper", chartAlloy,
			[]struct{ pod, ns map[string]string }{{alloy, monitoring}},
			[]struct{ pod, ns map[string]string }{{prometheus, monitoring}, {alloy, tracking}, {other, tracking}}},
	} {
		np := c.app.networkPolicy
		if np == nil {
			t.Errorf("%s: no NetworkPolicy", c.where)
			continue
		}
		port := c.app.deployment.Spec.Template.Spec.Containers[0].Ports[0].Name
		for _, p := range c.in {
			if !policyAdmits(t, np, port, p.pod, p.ns) {
				t.Errorf("%s: the NetworkPolicy keeps pod %v of namespace %v off the HTTP port", c.where, p.pod, p.ns)
			}
		}
		for _, p := range c.out {
			if policyAdmits(t, np, port, p.pod, p.ns) {
				t.Errorf("%s: the NetworkPolicy lets pod %v of namespace %v reach the HTTP port", c.where, p.pod, p.ns)
			}
		}
	}
}

// urlPort returns the port of the URL u, or def when it names none.
func urlPort(t *testing.T, u string, def int) int {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatalf("%q: %v", u, err)
	}
	if p.Port() == "" {
		if p.Scheme == "http" {
			return 80
		}
		return def
	}
	_, port, _ := net.SplitHostPort(p.Host)
	var n int
	fmt.Sscan(port, &n)
	return n
}

// promDuration reads a PrometheusRule's duration as Prometheus reads a rule file's (0 when absent).
func promDuration(t *testing.T, d *monitoringv1.Duration) model.Duration {
	t.Helper()
	if d == nil {
		return 0
	}
	v, err := model.ParseDuration(string(*d))
	if err != nil {
		t.Errorf("duration %q: %v", *d, err)
	}
	return v
}
