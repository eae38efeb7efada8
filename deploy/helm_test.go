package deploy_test

// Tests of the Helm chart, deploy/helm/tracking-bridge: helm lint --strict as the helm command runs it
// (Helm's own action package), renders of several value sets through Helm's engine as helm template
// does, each manifest decoded strictly into its Kubernetes type and checked as the kustomize manifests
// are, the values schema against the bridge's configuration, and the chart's equivalence with the
// kustomize base and example overlay.

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/tracking-bridge/tracking-bridge/config"
)

const (
	// chartDir is the chart, relative to the repository.
	chartDir = "deploy/helm/tracking-bridge"
	// exampleValues is the chart's equivalent of the kustomize overlay overlays/example.
	exampleValues = "deploy/helm/example-values.yaml"
	// chartRelease is the release name under which the chart's objects are named as the base's are.
	chartRelease = "tracking-bridge"
)

var update = flag.Bool("update", false,
	"rewrite the generated files: the config part of the chart's values schema, and the copies of deploy/monitoring")

// chartSetVars are the bridge's variables the chart sets from values of its own rather than from config,
// with the value that sets each. Every other variable but the secrets is a key of config.
var chartSetVars = map[string]string{
	"BRIDGE_HTTP_ADDR":           "httpPort",
	"BRIDGE_NATS_URL":            "nats.urls",
	"BRIDGE_NATS_USER":           "nats.user.name",
	"BRIDGE_PASSWORD_FILE":       "upstream.password",
	"BRIDGE_UPSTREAM_CA_FILE":    "upstream.ca",
	"BRIDGE_NATS_CREDS_FILE":     "nats.credentials",
	"BRIDGE_NATS_NKEY_SEED_FILE": "nats.nkey",
	"BRIDGE_NATS_PASSWORD_FILE":  "nats.user",
	"BRIDGE_NATS_TOKEN_FILE":     "nats.token",
	"BRIDGE_NATS_CA_FILE":        "nats.tls.ca",
	"BRIDGE_NATS_CERT_FILE":      "nats.tls.client",
	"BRIDGE_NATS_KEY_FILE":       "nats.tls.client",
}

// configVar is one row of config.Usage: a variable with its type, default and meaning.
type configVar struct {
	name, typ, def, desc string
	required             bool
}

// configVars returns the bridge's BRIDGE_* variables as config.Usage lists them (bridge -h,
// docs/configuration.md), secrets' _FILE variants included (type Path).
func configVars(t *testing.T) []configVar {
	t.Helper()
	var b strings.Builder
	config.Usage(&b)
	var vars []configVar
	var cols []int // where TYPE, DEFAULT and DESCRIPTION start
	for line := range strings.Lines(b.String()) {
		line = strings.TrimRight(line, "\n")
		if strings.HasPrefix(line, "VARIABLE ") {
			if cols != nil {
				break // the OTEL_* variables' table, which the chart's config does not take
			}
			for _, h := range []string{"TYPE", "DEFAULT", "DESCRIPTION"} {
				cols = append(cols, strings.Index(line, " "+h)+1)
			}
			continue
		}
		if cols == nil || !strings.HasPrefix(line, config.Prefix+"_") {
			continue
		}
		cell := func(i int) string {
			end := len(line)
			if i < len(cols)-1 {
				end = min(cols[i+1], end)
			}
			return strings.TrimSpace(line[min(cols[i], end):end])
		}
		v := configVar{name: strings.TrimSpace(line[:cols[0]]), typ: cell(0), def: cell(1), desc: cell(2)}
		if v.def == "(required)" {
			v.def, v.required = "", true
		}
		vars = append(vars, v)
	}
	if known := config.Variables(); len(vars) != len(known) {
		t.Fatalf("config.Usage lists %d variables, config.Variables names %d: the test no longer reads Usage right", len(vars), len(known))
	}
	return vars
}

// chartConfigKeys returns the variables that are keys of the chart's config: all but the secrets (type
// Secret, and their _FILE variants), the files (mounted by the chart), and chartSetVars.
func chartConfigKeys(t *testing.T) []configVar {
	t.Helper()
	var keys []configVar
	for _, v := range configVars(t) {
		_, set := chartSetVars[v.name]
		switch {
		case v.typ == "Secret" || set:
		case strings.HasSuffix(v.name, "_FILE"):
			t.Errorf("%s: a file the chart does not mount; add a value for it (the chart's fileVolumes) and to chartSetVars", v.name)
		default:
			keys = append(keys, v)
		}
	}
	return keys
}

// durationPattern is what time.ParseDuration accepts.
const durationPattern = `^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`

// configSchema is the values schema of the chart's config, generated from the configuration: one
// property a variable, typed, with its meaning and default, the variables without default required, and
// no other property.
func configSchema(t *testing.T) map[string]any {
	t.Helper()
	props := map[string]any{}
	var required []string
	for _, v := range chartConfigKeys(t) {
		p := map[string]any{"description": v.desc}
		var def any = v.def
		switch v.typ {
		case "Integer":
			p["type"], p["minimum"], p["pattern"] = []string{"integer", "string"}, 0, "^[0-9]+$"
			if v.def != "" {
				n, err := strconv.Atoi(v.def)
				if err != nil {
					t.Fatalf("%s: default %q: %v", v.name, v.def, err)
				}
				def = n
			}
		case "True or False":
			p["type"] = "boolean"
			if v.def != "" {
				b, err := strconv.ParseBool(v.def)
				if err != nil {
					t.Fatalf("%s: default %q: %v", v.name, v.def, err)
				}
				def = b
			}
		case "Duration":
			p["type"], p["pattern"] = "string", durationPattern
		case "Bytes":
			p["type"], p["minimum"], p["pattern"] = []string{"integer", "string"}, 0, "^[0-9]+(KiB|MiB|GiB|TiB)?$"
		case "String":
			p["type"] = "string"
		default:
			t.Fatalf("%s: type %q; configSchema knows no schema for it", v.name, v.typ)
		}
		if v.def != "" {
			p["default"] = def
		}
		if v.required {
			required = append(required, v.name)
		}
		props[v.name] = p
	}
	return jsonValue(t, map[string]any{
		"description": "The bridge's BRIDGE_* variables by name (docs/configuration.md), but for the secrets and those " +
			"the chart sets from other values. Generated from package config by deploy/helm_test.go.",
		"type":                 "object",
		"additionalProperties": false,
		"properties":           props,
		"required":             required,
	}).(map[string]any)
}

// jsonValue returns v as encoding/json decodes it into an any, so that two values compare alike.
func jsonValue(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestHelmValuesSchema: the chart's values schema has, under config, exactly the bridge's variables but
// for the secrets and those the chart sets from other values (chartSetVars), typed and described as the
// configuration has them. A variable added to the configuration fails it until the schema is rewritten
// with -update; a key in the schema that the configuration does not know fails it too.
func TestHelmValuesSchema(t *testing.T) {
	file := chartDir + "/values.schema.json"
	var schema map[string]any
	if err := json.Unmarshal([]byte(readRepo(t, file)), &schema); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	props, _ := schema["properties"].(map[string]any)
	if props == nil {
		t.Fatalf("%s: no properties", file)
	}
	known, _ := bridgeVars(t)
	for name := range chartSetVars {
		if !known[name] {
			t.Errorf("chartSetVars names %s, which the bridge does not read", name)
		}
	}
	want := configSchema(t)
	if *update {
		props["config"] = want
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(schema); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(repoPath(file), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, _ := props["config"].(map[string]any)
	gotProps, _ := got["properties"].(map[string]any)
	wantProps := want["properties"].(map[string]any)
	for _, name := range slices.Sorted(maps.Keys(gotProps)) {
		switch {
		case known[name] && wantProps[name] == nil:
			t.Errorf("%s: config.%s is a variable the chart sets from another value or a secret", file, name)
		case !known[name]:
			t.Errorf("%s: config.%s is not a variable of the bridge", file, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(wantProps)) {
		if d := cmp.Diff(wantProps[name], gotProps[name]); d != "" {
			t.Errorf("%s: config.%s is not the configuration's (-want +got):\n%s", file, name, d)
		}
	}
	delete(got, "properties")
	delete(want, "properties")
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("%s: config (-want +got):\n%s", file, d)
	}
	if t.Failed() {
		t.Logf("rewrite the schema's config from package config with: cd deploy && go test -run TestHelmValuesSchema -update")
	}
}

// helmKubeVersion is the Kubernetes version of the k8s.io modules this module builds with, as the helm
// command is built to assume (helm's Makefile stamps it into chartutil and the lint rules).
func helmKubeVersion(t *testing.T) *chartutil.KubeVersion {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s*k8s\.io/api v0\.(\d+)\.`).FindStringSubmatch(readRepo(t, "deploy/go.mod"))
	if m == nil {
		t.Fatal("deploy/go.mod requires no k8s.io/api v0.x")
	}
	kv, err := chartutil.ParseKubeVersion("v1." + m[1] + ".0")
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// helmValues reads values in YAML as helm -f does.
func helmValues(t *testing.T, yaml string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValues([]byte(yaml))
	if err != nil {
		t.Fatalf("values: %v\n%s", err, yaml)
	}
	return v.AsMap()
}

// helmTemplate renders the chart with vals as helm template --namespace namespace does (client only:
// Helm's default capabilities at helmKubeVersion, the values schema checked), and returns its manifests
// in order and its NOTES.txt.
func helmTemplate(t *testing.T, vals map[string]any, namespace string) (docs [][]byte, notes string, err error) {
	t.Helper()
	chrt, err := loader.Load(repoPath(chartDir))
	if err != nil {
		t.Fatalf("%s: %v", chartDir, err)
	}
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.DryRun, install.ClientOnly, install.Replace = true, true, true
	install.ReleaseName, install.Namespace = chartRelease, namespace
	install.KubeVersion = helmKubeVersion(t)
	rel, err := install.Run(chrt, vals)
	if err != nil {
		return nil, "", err
	}
	split := releaseutil.SplitManifests(rel.Manifest)
	keys := slices.Collect(maps.Keys(split))
	sort.Sort(releaseutil.BySplitManifestsOrder(keys))
	for _, k := range keys {
		docs = append(docs, []byte(split[k]))
	}
	if len(rel.Hooks) > 0 {
		t.Errorf("the chart has %d hooks; the tests decode no hook", len(rel.Hooks))
	}
	return docs, rel.Info.Notes, nil
}

// TestHelmLint runs helm lint --strict on the chart, with its own values and with the example's: a
// warning fails it as an error does.
func TestHelmLint(t *testing.T) {
	for name, vals := range map[string]map[string]any{
		"values.yaml":         {},
		"example-values.yaml": helmValues(t, readRepo(t, exampleValues)),
	} {
		lint := action.NewLint()
		lint.Strict, lint.Namespace, lint.KubeVersion = true, "default", helmKubeVersion(t)
		res := lint.Run([]string{repoPath(chartDir)}, vals)
		for _, m := range res.Messages {
			t.Logf("%s: %s", name, m)
		}
		if res.TotalChartsLinted != 1 || len(res.Errors) > 0 {
			t.Errorf("helm lint --strict %s with %s: %d charts linted, errors %v", chartDir, name, res.TotalChartsLinted, res.Errors)
		}
	}
}

// chartValueSets are the value sets the tests render, in YAML; together they set every variable the
// chart can set. "all config" is given every key of config as well (at the configuration's default).
var chartValueSets = []struct{ name, yaml, howTo string }{
	{name: "defaults", howTo: chartDir + "/values.yaml"},
	{name: "example", howTo: exampleValues},
	{name: "nkey, TLS and all config", yaml: `
nats:
  credentials: {existingSecret: ""}
  nkey: {existingSecret: bridge-nats-nkey, key: seed}
  tls:
    ca: {existingConfigMap: nats-ca}
    client: {existingSecret: bridge-nats-tls}
upstream:
  password: {existingSecret: upstream-account, key: pw}
  ca: {existingSecret: upstream-ca, key: bundle.pem}
httpPort: 9090
service: {port: 80, type: NodePort, annotations: {example.com/a: b}}
fullnameOverride: bridge
commonLabels: {team: logistics}
serviceAccount: {create: true, annotations: {iam.example.com/role: bridge}}
image: {repository: registry.example.com/bridge, digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
imagePullSecrets: [{name: registry}]
extraEnv: [{name: GOMAXPROCS, value: "2"}]
extraVolumes: [{name: tmp, emptyDir: {}}]
extraVolumeMounts: [{name: tmp, mountPath: /tmp}]
podAnnotations: {example.com/scrape: "false"}
podLabels: {tier: integration}
priorityClassName: high
nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: dedicated, operator: Equal, value: integration, effect: NoSchedule}]
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]}]
topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}
livenessProbe: {periodSeconds: 20, timeoutSeconds: 2, failureThreshold: 4}
readinessProbe: {periodSeconds: 5, failureThreshold: 2, successThreshold: 1}
resources: {requests: {cpu: "1", memory: 128Mi}, limits: {memory: 1Gi}}
serviceMonitor: {enabled: true, labels: {release: kube-prometheus-stack}, interval: 15s, scrapeTimeout: 10s}
prometheusRule: {enabled: true, labels: {release: kube-prometheus-stack}}
grafanaDashboard: {enabled: true, annotations: {grafana_folder: Logistics}}
networkPolicy:
  enabled: true
  ingressFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]
  natsTo: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: nats}}}]
  upstreamTo: [{ipBlock: {cidr: 0.0.0.0/0, except: [10.0.0.0/8]}}]
  extraEgress: [{ports: [{port: 4317, protocol: TCP}]}]
`},
	{name: "user and password", yaml: `
nats:
  credentials: {existingSecret: ""}
  user: {name: tracking-bridge, existingSecret: bridge-nats-user}
  tls:
    ca: {existingSecret: nats-ca}
upstream:
  ca: {existingConfigMap: upstream-ca}
podDisruptionBudget: {minAvailable: 1}
`},
	{name: "token", yaml: `
nats:
  credentials: {existingSecret: ""}
  token: {existingSecret: bridge-nats-token, key: tok}
`},
	{name: "no NATS authentication", yaml: `
nats:
  credentials: {existingSecret: ""}
  urls: [nats://nats-0.nats:4222, tls://nats-1.nats:4443]
`},
}

// allConfigYAML gives every key of the chart's config its default, in YAML as a values file has it
// (numbers and booleans bare), and returns what the ConfigMap should hold for each.
func allConfigYAML(t *testing.T) (yaml string, want map[string]string) {
	t.Helper()
	want = map[string]string{}
	var b strings.Builder
	b.WriteString("config:\n")
	for _, v := range chartConfigKeys(t) {
		if v.required {
			continue // the chart's values.yaml has them
		}
		val := strconv.Quote(v.def)
		if v.typ == "Integer" || v.typ == "True or False" {
			val = v.def
		}
		fmt.Fprintf(&b, "  %s: %s\n", v.name, val)
		want[v.name] = v.def
	}
	return b.String(), want
}

// chartRender renders one of chartValueSets and decodes it strictly.
func chartRender(t *testing.T, name, valuesYAML, namespace string) (*k8sApp, string) {
	t.Helper()
	docs, notes, err := helmTemplate(t, helmValues(t, valuesYAML), namespace)
	if err != nil {
		t.Fatalf("%s: helm template: %v", name, err)
	}
	return k8sDecode(t, name, docs), notes
}

// TestHelmTemplate renders the chart with each of chartValueSets and checks each as TestKustomize checks
// the kustomize manifests (k8sCheck, checkAddOns), and what is the chart's own: every key of config
// reaches the ConfigMap as written, the pods carry the ConfigMap's checksum, the NOTES name the Secrets to create,
// and the value sets together set every variable but the plain secrets.
func TestHelmTemplate(t *testing.T) {
	known, secret := bridgeVars(t)
	set := map[string]bool{} // every variable some value set sets
	for _, vs := range chartValueSets {
		t.Run(vs.name, func(t *testing.T) {
			values := vs.yaml
			var wantConfig map[string]string
			switch vs.name {
			case "example":
				values = readRepo(t, exampleValues)
			case "nkey, TLS and all config":
				var all string
				all, wantConfig = allConfigYAML(t)
				values += all
			}
			app, notes := chartRender(t, vs.name, values, "tracking")
			k8sCheck(t, vs.name, app, vs.howTo)
			checkAddOns(t, vs.name, app)

			env := appEnv(t, app)
			for k := range env {
				set[k] = true
			}
			for k, v := range wantConfig {
				if env[k] != v {
					t.Errorf("config.%s: the environment has %q, want %q", k, env[k], v)
				}
			}
			// The Service reaches any one pod: who leads is the lease's holder, which every pod's /status names.
			if !strings.Contains(notes, "/status | jq .lease.holder.name") {
				t.Errorf("NOTES.txt does not show the lease's holder in /status (.lease.holder.name):\n%s", notes)
			}
			tmpl := app.deployment.Spec.Template
			if tmpl.Annotations["checksum/config"] == "" {
				t.Error("the pod template has no checksum/config annotation: a change of config would not roll the pods")
			}
			for _, v := range tmpl.Spec.Volumes {
				name := ""
				switch {
				case v.Secret != nil:
					name = "Secret " + v.Secret.SecretName
				case v.ConfigMap != nil:
					name = "ConfigMap " + v.ConfigMap.Name
				default:
					continue
				}
				if !strings.Contains(notes, name+", key ") {
					t.Errorf("NOTES.txt does not say that %s is needed:\n%s", name, notes)
				}
			}
		})
	}
	// Every variable but the plain secrets (which only their _FILE variants set) is set by one of them.
	if t.Failed() {
		return // a value set that did not render sets nothing
	}
	for _, name := range slices.Sorted(maps.Keys(known)) {
		if !set[name] && (!secret[name] || strings.HasSuffix(name, "_FILE")) {
			t.Errorf("%s is set by none of the value sets: the chart cannot set it, or chartValueSets does not try", name)
		}
	}
}

// appEnv is the bridge's environment in app: its env ConfigMap's data and the container's env.
func appEnv(t *testing.T, app *k8sApp) map[string]string {
	t.Helper()
	env := map[string]string{}
	c := app.deployment.Spec.Template.Spec.Containers[0]
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef != nil && app.configMaps[from.ConfigMapRef.Name] != nil {
			maps.Copy(env, app.configMaps[from.ConfigMapRef.Name].Data)
		}
	}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

// TestHelmValuesRefused: values the chart must refuse, by its schema or its templates, with a message
// naming the value.
func TestHelmValuesRefused(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"misspelt config key", "config: {BRIDGE_UPSTREAM_ULR: https://x.example}", "BRIDGE_UPSTREAM_ULR"},
		{"secret in config", "config: {BRIDGE_PASSWORD: hunter2}", "BRIDGE_PASSWORD"},
		{"secret file in config", "config: {BRIDGE_PASSWORD_FILE: /tmp/pw}", "BRIDGE_PASSWORD_FILE"},
		{"chart-set variable in config", "config: {BRIDGE_NATS_URL: nats://x:4222}", "BRIDGE_NATS_URL"},
		{"not a duration", "config: {BRIDGE_LEASE_TTL: 15}", "BRIDGE_LEASE_TTL"},
		{"not a size", "config: {BRIDGE_EVENTS_STREAM_MAX_BYTES: 4GB}", "BRIDGE_EVENTS_STREAM_MAX_BYTES"},
		{"not a number", "config: {BRIDGE_STREAM_REPLICAS: three}", "BRIDGE_STREAM_REPLICAS"},
		{"not a boolean", "config: {BRIDGE_INSECURE_HTTP: yes please}", "BRIDGE_INSECURE_HTTP"},
		{"required config removed", "config: {BRIDGE_UPSTREAM_URL: null}", "BRIDGE_UPSTREAM_URL"},
		{"misspelt top-level key", "replicaCont: 3", "replicaCont"},
		{"misspelt nested key", "nats: {credentials: {existingSecrets: x}}", "existingSecrets"},
		{"BRIDGE_ variable in extraEnv", "extraEnv: [{name: BRIDGE_PASSWORD, value: hunter2}]", "extraEnv"},
		{"no upstream password", `upstream: {password: {existingSecret: ""}}`, "existingSecret"},
		{"two NATS methods", "nats: {nkey: {existingSecret: seed}}", "at most one"},
		{"NATS user without password", "nats: {credentials: {existingSecret: \"\"}, user: {name: bridge}}", "nats.user"},
		{"CA from two places", "upstream: {ca: {existingSecret: a, existingConfigMap: b}}", "upstream.ca"},
		{"no NATS URL", "nats: {urls: []}", "urls"},
		{"not a NATS URL", "nats: {urls: [http://nats:4222]}", "urls"},
		{"selector label in commonLabels", "commonLabels: {app.kubernetes.io/name: other}", "commonLabels"},
		{"instance label in commonLabels", "commonLabels: {app.kubernetes.io/instance: other}", "commonLabels"},
		{"chart label in podLabels", "podLabels: {app.kubernetes.io/component: other}", "podLabels"},
		{"grace not above the shutdown timeout", "config: {BRIDGE_SHUTDOWN_TIMEOUT: 120s}", "terminationGracePeriodSeconds"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := helmTemplate(t, helmValues(t, c.yaml), "default")
			if err == nil {
				t.Fatalf("rendered without an error")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("the error does not name %s:\n%v", c.want, err)
			}
		})
	}
}

// TestHelmExtraLabels: the labels the schema refuses in commonLabels and podLabels are exactly those the
// chart sets itself on its objects and pods (a second value for one would be a duplicate key, and for
// a selector's label a pod outside its Deployment, Service and PodDisruptionBudget).
func TestHelmExtraLabels(t *testing.T) {
	var schema struct {
		Definitions struct {
			ExtraLabels struct {
				Properties map[string]bool `json:"properties"` // each false: refused
			} `json:"extraLabels"`
		} `json:"definitions"`
	}
	if err := json.Unmarshal([]byte(readRepo(t, chartDir+"/values.schema.json")), &schema); err != nil {
		t.Fatal(err)
	}
	var refused []string
	for k, allowed := range schema.Definitions.ExtraLabels.Properties {
		if !allowed {
			refused = append(refused, k)
		}
	}
	slices.Sort(refused)
	app, _ := chartRender(t, "defaults", "", "default")
	own := slices.Sorted(maps.Keys(app.deployment.Spec.Template.Labels))
	if d := cmp.Diff(own, refused); d != "" {
		t.Errorf("values.schema.json's extraLabels refuses other labels than the chart sets on its pods (-pods +refused):\n%s", d)
	}
}

// TestHelmShutdownGrace: the chart renders a terminationGracePeriodSeconds only when it is more than
// BRIDGE_SHUTDOWN_TIMEOUT plus what the bridge allows itself past it (shutdownGrace), as Go reads the
// duration, for each form of duration a values file may write, and refuses it otherwise, naming it.
func TestHelmShutdownGrace(t *testing.T) {
	for _, c := range []struct {
		timeout string // "": the chart's values.yaml; null: unset, the bridge's default
		grace   int
	}{
		{"", 32}, {"", 33}, {"null", 32}, {"null", 33}, {"30s", 40}, {"38s", 40}, {"37500ms", 40}, {"37.9s", 40},
		{"120s", 40}, {"120s", 122}, {"120s", 123}, {"2m", 123}, {"1m30s", 92}, {"1m30s", 93},
		{"1.5m", 93}, {"1h", 3602}, {"1h", 3603}, {"1h0m1s", 3603}, {"500ms", 3}, {"2000000us", 5},
	} {
		name := fmt.Sprintf("timeout %q grace %d", c.timeout, c.grace)
		t.Run(name, func(t *testing.T) {
			values := fmt.Sprintf("terminationGracePeriodSeconds: %d\n", c.grace)
			timeout := config.Default().ShutdownTimeout // the chart assumes it when config leaves it unset
			if c.timeout != "" {
				values += "config: {BRIDGE_SHUTDOWN_TIMEOUT: " + c.timeout + "}\n"
			}
			set := c.timeout
			if set == "" {
				set = fmt.Sprint(helmValues(t, readRepo(t, chartDir+"/values.yaml"))["config"].(map[string]any)["BRIDGE_SHUTDOWN_TIMEOUT"])
			}
			if set != "null" {
				var err error
				if timeout, err = time.ParseDuration(set); err != nil {
					t.Fatal(err)
				}
			}
			want := time.Duration(c.grace)*time.Second > timeout+shutdownGrace(t)
			docs, _, err := helmTemplate(t, helmValues(t, values), "default")
			switch {
			case want && err != nil:
				t.Errorf("refused: %v", err)
			case !want && err == nil:
				t.Errorf("rendered; want it refused (%v plus %v)", timeout, shutdownGrace(t))
			case !want && !strings.Contains(err.Error(), "terminationGracePeriodSeconds"):
				t.Errorf("the error does not name terminationGracePeriodSeconds: %v", err)
			case want:
				app := k8sDecode(t, name, docs)
				if g := app.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g != int64(c.grace) {
					t.Errorf("terminationGracePeriodSeconds %v, want %d", g, c.grace)
				}
			}
		})
	}
}

// TestHelmKustomizeEquivalent: the chart with its own values, less its NetworkPolicy, renders what the
// kustomize base renders, and with example-values.yaml what the example overlay (base, monitoring and
// network-policy components) renders: the same objects, names and fields, the same ConfigMap, once the differences that are
// Helm's conventions are set aside (helmNormal). A change on one side only fails it.
func TestHelmKustomizeEquivalent(t *testing.T) {
	for _, c := range []struct{ name, values, kustomization string }{
		// The chart's NetworkPolicy is on by default; the base leaves it to the network-policy component,
		// which the example overlay adds.
		{"defaults", "networkPolicy: {enabled: false}", k8sRoot + "/base"},
		{"example", readRepo(t, exampleValues), k8sRoot + "/overlays/example"},
	} {
		t.Run(c.name, func(t *testing.T) {
			chartApp, _ := chartRender(t, c.name, c.values, "tracking")
			kApp := kustomize(t, c.kustomization)
			kImage := kApp.deployment.Spec.Template.Spec.Containers[0].Image
			// The base names the image without a tag, for overlays to set; the chart defaults to its appVersion.
			untagged := !strings.ContainsAny(kImage[strings.LastIndex(kImage, "/")+1:], ":@")
			got, want := helmNormal(t, chartApp, untagged), helmNormal(t, kApp, false)
			for _, key := range slices.Sorted(maps.Keys(want)) {
				if _, ok := got[key]; !ok {
					t.Errorf("%s renders %s; the chart does not", c.kustomization, key)
				}
			}
			for _, key := range slices.Sorted(maps.Keys(got)) {
				w, ok := want[key]
				if !ok {
					t.Errorf("the chart renders %s; %s does not", key, c.kustomization)
					continue
				}
				if d := cmp.Diff(w, got[key]); d != "" {
					t.Errorf("%s differs (-%s +chart):\n%s", key, c.kustomization, d)
				}
			}
		})
	}
}

// helmLabels are labels that only Helm's conventions add (the release, versions, who manages it).
var helmLabels = []string{"app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "helm.sh/chart"}

// helmNormal returns every object of app as YAML by kind and name, with what may differ between the
// chart and kustomize set aside: Helm's labels (helmLabels, in selectors too), the pod template's
// checksum annotation (kustomize rolls the pods by the ConfigMap's hashed name instead), namespaces (Helm
// sets them at install time), the env ConfigMap's name (hashed by kustomize), a Service's default type;
// with untagged, the image's tag.
func helmNormal(t *testing.T, app *k8sApp, untagged bool) map[string]string {
	t.Helper()
	strip := func(l map[string]string) map[string]string {
		for _, k := range helmLabels {
			delete(l, k)
		}
		if len(l) == 0 {
			return nil
		}
		return l
	}
	stripSelector := func(s *metav1.LabelSelector) {
		if s != nil {
			s.MatchLabels = strip(s.MatchLabels)
		}
	}
	envCM := map[string]bool{}
	for _, from := range app.deployment.Spec.Template.Spec.Containers[0].EnvFrom {
		if from.ConfigMapRef != nil {
			envCM[from.ConfigMapRef.Name] = true
		}
	}
	const envName = "(the environment)"
	out := map[string]string{}
	for _, obj := range app.objects {
		obj = obj.DeepCopyObject()
		m, err := meta.Accessor(obj)
		if err != nil {
			t.Fatal(err)
		}
		m.SetNamespace("")
		m.SetLabels(strip(m.GetLabels()))
		switch o := obj.(type) {
		case *appsv1.Deployment:
			stripSelector(o.Spec.Selector)
			pod := &o.Spec.Template
			pod.Labels = strip(pod.Labels)
			delete(pod.Annotations, "checksum/config")
			if len(pod.Annotations) == 0 {
				pod.Annotations = nil
			}
			for i := range pod.Spec.TopologySpreadConstraints {
				stripSelector(pod.Spec.TopologySpreadConstraints[i].LabelSelector)
			}
			for i := range pod.Spec.Containers {
				c := &pod.Spec.Containers[i]
				for _, from := range c.EnvFrom {
					if from.ConfigMapRef != nil && envCM[from.ConfigMapRef.Name] {
						from.ConfigMapRef.Name = envName
					}
				}
				if untagged {
					c.Image = strings.SplitN(c.Image, "@", 2)[0]
					if i := strings.LastIndex(c.Image, ":"); i > strings.LastIndex(c.Image, "/") {
						c.Image = c.Image[:i]
					}
				}
			}
		case *policyv1.PodDisruptionBudget:
			stripSelector(o.Spec.Selector)
		case *corev1.Service:
			o.Spec.Selector = strip(o.Spec.Selector)
			if o.Spec.Type == "" {
				o.Spec.Type = corev1.ServiceTypeClusterIP
			}
		case *corev1.ConfigMap:
			if envCM[o.Name] {
				o.Name = envName
			}
		case *monitoringv1.ServiceMonitor:
			o.Spec.Selector.MatchLabels = strip(o.Spec.Selector.MatchLabels)
		case *networkingv1.NetworkPolicy:
			stripSelector(&o.Spec.PodSelector)
		}
		y, err := sigsyaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		out[reflect.TypeOf(obj).Elem().Name()+" "+m.GetName()] = string(y)
	}
	return out
}

// TestHelmDocsValues renders the values file that docs/operations.md shows for the chart, so that what
// the documentation tells to write installs.
func TestHelmDocsValues(t *testing.T) {
	doc := readRepo(t, "docs/operations.md")
	_, section, ok := strings.Cut(doc, "\n### The Helm chart\n")
	if !ok {
		t.Fatal("docs/operations.md has no section The Helm chart")
	}
	_, block, ok := strings.Cut(section, "\n```yaml\n")
	block, _, closed := strings.Cut(block, "\n```\n")
	if !ok || !closed {
		t.Fatal("docs/operations.md, The Helm chart: no yaml block of values")
	}
	app, _ := chartRender(t, "docs/operations.md", block, "tracking")
	k8sCheck(t, "docs/operations.md", app, "docs/operations.md")
	checkAddOns(t, "docs/operations.md", app)
}

// TestHelmConfigRollsPods: a change of config changes the pod template (its checksum/config
// annotation), so that the pods restart with it, as kustomize's hashed ConfigMap name makes them do; a
// change of a pod annotation alone leaves the checksum as it was.
func TestHelmConfigRollsPods(t *testing.T) {
	checksum := func(values string) string {
		app, _ := chartRender(t, "checksum", values, "default")
		return app.deployment.Spec.Template.Annotations["checksum/config"]
	}
	base := checksum("")
	if base == "" {
		t.Fatal("no checksum/config annotation")
	}
	if checksum("config: {BRIDGE_LOG_LEVEL: debug}") == base {
		t.Error("a change of config.BRIDGE_LOG_LEVEL leaves the pod template as it was")
	}
	if checksum("nats: {urls: [nats://other:4222]}") == base {
		t.Error("a change of nats.urls leaves the pod template as it was")
	}
	if checksum("podAnnotations: {example.com/a: b}") != base {
		t.Error("a pod annotation changes the ConfigMap's checksum")
	}
}
