package config_test

// Tests of the Kubernetes manifests, deploy/kubernetes: a kustomize base and overlays. They check the
// source files (so they run anywhere) and, where kubectl is installed, what kustomize renders from them:
// the Deployment's replicas, rolling update, probes, ports and grace period against the bridge's
// defaults, every BRIDGE_* name against the configuration, secrets as mounted files only, and the labels
// the PodDisruptionBudget and the Service select.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	"go.yaml.in/yaml/v3"
)

// k8sRoot is the manifests' directory, relative to the repository.
const k8sRoot = "deploy/kubernetes"

// k8sDocs parses a stream of YAML documents (one file, or kustomize's output) into maps; empty documents
// are skipped.
func k8sDocs(t *testing.T, where string, src []byte) []map[string]any {
	t.Helper()
	if bytes.Contains(src, []byte("\t")) {
		t.Errorf("%s: tab character", where)
	}
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var out []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if doc != nil {
			out = append(out, doc)
		}
	}
}

// k8sGet walks obj along a dotted path of map keys; it returns nil where the path ends early.
func k8sGet(obj any, dotted string) any {
	for key := range strings.SplitSeq(dotted, ".") {
		m, ok := obj.(map[string]any)
		if !ok {
			return nil
		}
		obj = m[key]
	}
	return obj
}

// k8sList is k8sGet for a list of maps (containers, env, volumes); nil when absent.
func k8sList(t *testing.T, obj any, dotted string) []map[string]any {
	t.Helper()
	v := k8sGet(obj, dotted)
	if v == nil {
		return nil
	}
	list, ok := v.([]any)
	if !ok {
		t.Fatalf("%s is not a list", dotted)
	}
	out := make([]map[string]any, len(list))
	for i, x := range list {
		m, ok := x.(map[string]any)
		if !ok {
			t.Fatalf("%s[%d] is not a map", dotted, i)
		}
		out[i] = m
	}
	return out
}

// k8sStringMap is k8sGet for a map of strings (labels, selectors, ConfigMap data).
func k8sStringMap(t *testing.T, obj any, dotted string) map[string]string {
	t.Helper()
	m, ok := k8sGet(obj, dotted).(map[string]any)
	if !ok {
		t.Fatalf("%s is not a map", dotted)
	}
	out := map[string]string{}
	for k, v := range m {
		s, ok := v.(string)
		if !ok {
			t.Fatalf("%s.%s is %T, not a string (quote it)", dotted, k, v)
		}
		out[k] = s
	}
	return out
}

// k8sSubset reports whether every label of sel is in labels with the same value, and sel is not empty.
func k8sSubset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// k8sApp is one deployment of the bridge as the API server would receive it: the objects by kind, and the
// ConfigMaps' data by name.
type k8sApp struct {
	deployment, pdb, service map[string]any
	configMaps               map[string]map[string]string
}

// k8sCollect sorts documents into a k8sApp; exactly one Deployment, PodDisruptionBudget and Service.
func k8sCollect(t *testing.T, where string, docs []map[string]any, app *k8sApp) {
	t.Helper()
	if app.configMaps == nil {
		app.configMaps = map[string]map[string]string{}
	}
	for _, d := range docs {
		target := map[string]*map[string]any{"Deployment": &app.deployment, "PodDisruptionBudget": &app.pdb, "Service": &app.service}
		kind, _ := d["kind"].(string)
		switch p := target[kind]; {
		case kind == "ConfigMap":
			data := map[string]string{}
			if d["data"] != nil {
				data = k8sStringMap(t, d, "data")
			}
			app.configMaps[k8sGet(d, "metadata.name").(string)] = data
		case p != nil:
			if *p != nil {
				t.Errorf("%s: a second %s", where, kind)
			}
			*p = d
		default:
			t.Errorf("%s: unexpected kind %q", where, kind)
		}
	}
	for kind, obj := range map[string]map[string]any{"Deployment": app.deployment, "PodDisruptionBudget": app.pdb, "Service": app.service} {
		if obj == nil {
			t.Fatalf("%s: no %s", where, kind)
		}
	}
}

// k8sFileContent returns what a test file standing for the secret file of variable name holds: text the
// configuration accepts for it.
func k8sFileContent(t *testing.T, name string) string {
	t.Helper()
	switch name {
	case "BRIDGE_NATS_CREDS_FILE", "BRIDGE_NATS_NKEY_SEED_FILE":
		user, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		seed, err := user.Seed()
		if err != nil {
			t.Fatal(err)
		}
		if name == "BRIDGE_NATS_NKEY_SEED_FILE" {
			return string(seed) + "\n"
		}
		// As nsc writes it; the configuration parses the JWT out, it does not verify it.
		return "-----BEGIN NATS USER JWT-----\neyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.e30.c2ln\n------END NATS USER JWT------\n\n" +
			"-----BEGIN USER NKEY SEED-----\n" + string(seed) + "\n------END USER NKEY SEED------\n"
	case "BRIDGE_PASSWORD_FILE", "BRIDGE_NATS_PASSWORD_FILE", "BRIDGE_NATS_TOKEN_FILE":
		return "not-the-real-secret\n"
	}
	t.Fatalf("%s: the test has no content for this file; add it to k8sFileContent", name)
	return ""
}

// k8sSecretVars are the variables whose values are secret: Config's Secret fields and the files that hold
// keys. They must reach the bridge as files of a mounted Secret, never as values.
func k8sSecretVars(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{"BRIDGE_NATS_CREDS_FILE": true, "BRIDGE_NATS_NKEY_SEED_FILE": true, "BRIDGE_NATS_KEY_FILE": true}
	for _, v := range deployVars(t) {
		if v.secret {
			out[v.name] = true
			out[v.name+"_FILE"] = true
		}
	}
	return out
}

// k8sCheck checks one deployment of the bridge; where names it in messages.
func k8sCheck(t *testing.T, where string, app *k8sApp) {
	dep := app.deployment

	// Replicas and rollouts: two, and a new pod ready before an old one stops.
	replicas, _ := k8sGet(dep, "spec.replicas").(int)
	if replicas != 2 {
		t.Errorf("%s: Deployment replicas %v, want 2", where, k8sGet(dep, "spec.replicas"))
	}
	if s := k8sGet(dep, "spec.strategy.type"); s != "RollingUpdate" {
		t.Errorf("%s: strategy %v, want RollingUpdate", where, s)
	}
	if s, u := k8sGet(dep, "spec.strategy.rollingUpdate.maxSurge"), k8sGet(dep, "spec.strategy.rollingUpdate.maxUnavailable"); s != 1 || u != 0 {
		t.Errorf("%s: maxSurge %v, maxUnavailable %v; want 1 and 0", where, s, u)
	}

	// Labels: the Deployment, the PodDisruptionBudget and the Service select the pods.
	podLabels := k8sStringMap(t, dep, "spec.template.metadata.labels")
	for what, sel := range map[string]map[string]string{
		"the Deployment's selector":          k8sStringMap(t, dep, "spec.selector.matchLabels"),
		"the PodDisruptionBudget's selector": k8sStringMap(t, app.pdb, "spec.selector.matchLabels"),
		"the Service's selector":             k8sStringMap(t, app.service, "spec.selector"),
	} {
		if !k8sSubset(sel, podLabels) {
			t.Errorf("%s: %s %v does not select the pods %v", where, what, sel, podLabels)
		}
	}
	if m := k8sGet(app.pdb, "spec.minAvailable"); m != 1 {
		t.Errorf("%s: PodDisruptionBudget minAvailable %v, want 1", where, m)
	}

	pod := k8sGet(dep, "spec.template.spec")
	containers := k8sList(t, pod, "containers")
	if len(containers) != 1 {
		t.Fatalf("%s: %d containers, want the bridge alone", where, len(containers))
	}
	c := containers[0]
	if _, ok := c["command"]; ok {
		t.Errorf("%s: the container overrides the image's entrypoint (/bridge)", where)
	}

	// The environment: the ConfigMap's variables and the container's own, all of them the bridge's.
	known := deployKnown(t)
	secretVars := k8sSecretVars(t)
	env := map[string]string{}
	for _, from := range k8sList(t, c, "envFrom") {
		if from["secretRef"] != nil {
			t.Errorf("%s: envFrom a Secret: secrets must come as files", where)
		}
		name, _ := k8sGet(from, "configMapRef.name").(string)
		data, ok := app.configMaps[name]
		if !ok {
			t.Fatalf("%s: envFrom ConfigMap %q, which is not generated", where, name)
		}
		for k, v := range data {
			if !known[k] {
				t.Errorf("%s: ConfigMap %s sets %s, which the bridge does not read", where, name, k)
			}
			if secretVars[k] {
				t.Errorf("%s: ConfigMap %s sets %s: secrets come from mounted Secrets", where, name, k)
			}
			env[k] = v
		}
	}
	fileVars := map[string]string{}
	for _, e := range k8sList(t, c, "env") {
		name, _ := e["name"].(string)
		if !known[name] {
			t.Errorf("%s: env sets %s, which the bridge does not read", where, name)
		}
		if k8sGet(e, "valueFrom.secretKeyRef") != nil {
			t.Errorf("%s: %s comes from a Secret as a value; mount the Secret and set the _FILE variable", where, name)
		}
		v, ok := e["value"].(string)
		if !ok {
			t.Errorf("%s: env %s has no plain value", where, name)
			continue
		}
		if _, dup := env[name]; dup {
			t.Errorf("%s: %s is set in both the ConfigMap and the container", where, name)
		}
		env[name] = v
		if strings.HasSuffix(name, "_FILE") {
			fileVars[name] = v
		}
	}
	for name := range env {
		if secretVars[name] && !strings.HasSuffix(name, "_FILE") {
			t.Errorf("%s: %s is set as a value; set %s_FILE to a mounted Secret's file", where, name, name)
		}
	}
	deployCheckReplicaVars(t, where, env, 0)

	// Every file the variables name is in a read-only mount: a Secret's for secrets.
	volumes := map[string]map[string]any{}
	for _, v := range k8sList(t, pod, "volumes") {
		volumes[v["name"].(string)] = v
	}
	secretFiles := map[string][]string{} // Secret name -> keys the variables read
	for name, p := range fileVars {
		var mount map[string]any
		for _, m := range k8sList(t, c, "volumeMounts") {
			if mp, _ := m["mountPath"].(string); path.Dir(p) == path.Clean(mp) {
				mount = m
			}
		}
		if mount == nil {
			t.Errorf("%s: %s=%s is in no volume mount", where, name, p)
			continue
		}
		if mount["readOnly"] != true {
			t.Errorf("%s: the mount of %s is not readOnly", where, name)
		}
		secret, _ := k8sGet(volumes[mount["name"].(string)], "secret.secretName").(string)
		if secretVars[name] && secret == "" {
			t.Errorf("%s: %s is not in a Secret's volume", where, name)
		}
		if secret != "" {
			secretFiles[secret] = append(secretFiles[secret], path.Base(p))
		}
	}

	// The configuration loads, with test files where the Secrets' files would be.
	dir := t.TempDir()
	loadEnv := map[string]string{}
	for k, v := range env {
		loadEnv[k] = v
	}
	for name := range fileVars {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(k8sFileContent(t, name)), 0o600); err != nil {
			t.Fatal(err)
		}
		loadEnv[name] = f
	}
	cfg, err := deployLoad(loadEnv)
	if err != nil {
		t.Fatalf("%s: the configuration does not load:\n%v", where, err)
	}

	// The HTTP port: the container's, the probes', the Service's.
	_, httpPort, _ := net.SplitHostPort(cfg.HTTPAddr)
	var portName string
	for _, p := range k8sList(t, c, "ports") {
		if fmt.Sprint(p["containerPort"]) == httpPort {
			portName, _ = p["name"].(string)
		}
	}
	if portName == "" {
		t.Fatalf("%s: no named container port %s (BRIDGE_HTTP_ADDR)", where, httpPort)
	}
	for probe, want := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz", "startupProbe": "/healthz"} {
		p := k8sGet(c, probe)
		if p == nil {
			if probe != "startupProbe" {
				t.Errorf("%s: no %s", where, probe)
			}
			continue
		}
		if got := k8sGet(p, "httpGet.path"); got != want {
			t.Errorf("%s: %s path %v, want %s", where, probe, got, want)
		}
		if got := fmt.Sprint(k8sGet(p, "httpGet.port")); got != portName && got != httpPort {
			t.Errorf("%s: %s port %v, want %s (%s)", where, probe, got, portName, httpPort)
		}
	}
	var servicePort bool
	for _, p := range k8sList(t, app.service, "spec.ports") {
		if target := fmt.Sprint(p["targetPort"]); target == portName || target == httpPort {
			servicePort = true
		}
	}
	if !servicePort {
		t.Errorf("%s: the Service has no port to %s", where, portName)
	}

	// Stopping: longer than BRIDGE_SHUTDOWN_TIMEOUT plus what the process allows itself past it.
	grace, _ := k8sGet(pod, "terminationGracePeriodSeconds").(int)
	if limit := cfg.ShutdownTimeout + deployShutdownGrace(t); time.Duration(grace)*time.Second <= limit {
		t.Errorf("%s: terminationGracePeriodSeconds %d, want more than %v (BRIDGE_SHUTDOWN_TIMEOUT %v plus %v)",
			where, grace, limit, cfg.ShutdownTimeout, deployShutdownGrace(t))
	}

	// Security: non-root, read-only, no privileges, and resources.
	if k8sGet(pod, "securityContext.runAsNonRoot") != true {
		t.Errorf("%s: the pod does not set runAsNonRoot", where)
	}
	for key, want := range map[string]any{
		"securityContext.readOnlyRootFilesystem":   true,
		"securityContext.allowPrivilegeEscalation": false,
		"securityContext.capabilities.drop":        []any{"ALL"},
	} {
		if got := k8sGet(c, key); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: container %s is %v, want %v", where, key, got, want)
		}
	}
	for _, key := range []string{"resources.requests.cpu", "resources.requests.memory", "resources.limits.memory"} {
		if k8sGet(c, key) == nil {
			t.Errorf("%s: container has no %s", where, key)
		}
	}

	// The Secrets are created as the base's header says, with the keys the variables read.
	header := deployRead(t, k8sRoot+"/base/kustomization.yaml")
	for secret, keys := range secretFiles {
		for _, key := range keys {
			if cmd := "kubectl create secret generic " + secret + " --from-file=" + key + "="; !strings.Contains(header, cmd) {
				t.Errorf("%s: base/kustomization.yaml does not say how to create Secret %s with key %s (%q)", where, secret, key, cmd)
			}
		}
	}
}

// k8sKustomization is the part of a kustomization.yaml the tests read.
type k8sKustomization struct {
	Resources          []string `yaml:"resources"`
	Namespace          string   `yaml:"namespace"`
	ConfigMapGenerator []struct {
		Name     string   `yaml:"name"`
		Behavior string   `yaml:"behavior"`
		Envs     []string `yaml:"envs"`
		Literals []string `yaml:"literals"`
	} `yaml:"configMapGenerator"`
	Images []struct {
		Name    string `yaml:"name"`
		NewName string `yaml:"newName"`
		NewTag  string `yaml:"newTag"`
	} `yaml:"images"`
}

// k8sLoad reads the kustomization in dir (relative to the repository) and the objects it makes, as
// kustomize would for the parts used here: resources (files, or directories with a kustomization),
// configMapGenerator from env files and literals (merge included), images and namespace. Every YAML file
// in dir must be a resource or the kustomization.
func k8sLoad(t *testing.T, dir string) (*k8sApp, k8sKustomization) {
	t.Helper()
	var k k8sKustomization
	raw := deployRead(t, dir+"/kustomization.yaml")
	k8sDocs(t, dir+"/kustomization.yaml", []byte(raw)) // one document, no tabs
	if err := yaml.Unmarshal([]byte(raw), &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	app := &k8sApp{configMaps: map[string]map[string]string{}}
	var docs []map[string]any
	for _, r := range k.Resources {
		p := path.Join(dir, r)
		st, err := os.Stat(filepath.Join("..", p))
		if err != nil {
			t.Fatalf("%s: resource %s: %v", dir, r, err)
		}
		if st.IsDir() {
			sub, _ := k8sLoad(t, p)
			docs = append(docs, sub.deployment, sub.pdb, sub.service)
			for name, data := range sub.configMaps {
				app.configMaps[name] = data
			}
			continue
		}
		docs = append(docs, k8sDocs(t, p, []byte(deployRead(t, p)))...)
	}
	entries, err := os.ReadDir(filepath.Join("..", dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if ext := path.Ext(e.Name()); (ext == ".yaml" || ext == ".yml") && e.Name() != "kustomization.yaml" && !slices.Contains(k.Resources, e.Name()) {
			t.Errorf("%s/%s is not a resource of its kustomization", dir, e.Name())
		}
	}
	for _, g := range k.ConfigMapGenerator {
		data := map[string]string{}
		switch g.Behavior {
		case "", "create":
			if _, exists := app.configMaps[g.Name]; exists {
				t.Errorf("%s: ConfigMap %s is generated twice; merge or replace it", dir, g.Name)
			}
		case "merge":
			base, exists := app.configMaps[g.Name]
			if !exists {
				t.Errorf("%s: merges into ConfigMap %s, which its resources do not generate", dir, g.Name)
			}
			for k, v := range base {
				data[k] = v
			}
		default:
			t.Errorf("%s: generator %s: behavior %q", dir, g.Name, g.Behavior)
		}
		for _, f := range g.Envs {
			active, _ := deployEnvFile(t, deployRead(t, path.Join(dir, f)))
			for k, v := range active {
				data[k] = v
			}
		}
		for _, l := range g.Literals {
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				t.Errorf("%s: literal %q is not KEY=value", dir, l)
			}
			data[k] = v
		}
		app.configMaps[g.Name] = data
	}
	k8sCollect(t, dir, docs, app)
	if len(k.Images) > 0 {
		c := k8sList(t, app.deployment, "spec.template.spec.containers")[0]
		for _, img := range k.Images {
			if img.Name != c["image"] {
				t.Errorf("%s: images names %q, the container runs %q", dir, img.Name, c["image"])
			}
		}
	}
	return app, k
}

// k8sKustomizations returns every directory under deploy/kubernetes with a kustomization.yaml, and checks
// that every YAML file there parses.
func k8sKustomizations(t *testing.T) []string {
	t.Helper()
	var dirs []string
	known := deployKnown(t)
	root := filepath.Join("..", k8sRoot)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", p)
		rel = filepath.ToSlash(rel)
		switch {
		case d.Name() == "kustomization.yaml":
			dirs = append(dirs, path.Dir(rel))
		case strings.HasSuffix(p, ".yaml"), strings.HasSuffix(p, ".yml"):
			k8sDocs(t, rel, []byte(deployRead(t, rel)))
		}
		if !d.IsDir() {
			deployCheckNames(t, rel, known)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(dirs)
	return dirs
}

// TestKustomizeManifests checks the base and every overlay as written (no tool needed): each builds a
// deployment of the bridge that k8sCheck accepts.
func TestKustomizeManifests(t *testing.T) {
	dirs := k8sKustomizations(t)
	if !slices.Contains(dirs, k8sRoot+"/base") {
		t.Fatalf("no %s/base/kustomization.yaml (found %q)", k8sRoot, dirs)
	}
	for _, dir := range dirs {
		t.Run(strings.TrimPrefix(dir, k8sRoot+"/"), func(t *testing.T) {
			app, k := k8sLoad(t, dir)
			k8sCheck(t, dir, app)
			if dir != k8sRoot+"/base" && (k.Namespace == "" || len(k.Images) == 0) {
				t.Errorf("%s: an overlay should set the namespace and the image", dir)
			}
		})
	}
}

// TestKustomizeBuild renders the base and every overlay with kubectl's kustomize, where kubectl is
// installed, and checks the result as the API server would receive it (the generated ConfigMap's hashed
// name, the image as set by the overlay).
func TestKustomizeBuild(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not installed: the manifests are checked as written only (TestKustomizeManifests)")
	}
	for _, dir := range k8sKustomizations(t) {
		t.Run(strings.TrimPrefix(dir, k8sRoot+"/"), func(t *testing.T) {
			var stderr bytes.Buffer
			cmd := exec.Command(kubectl, "kustomize", filepath.Join("..", dir))
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr.String())
			}
			app := &k8sApp{}
			k8sCollect(t, dir+" (rendered)", k8sDocs(t, dir+" (rendered)", out), app)
			k8sCheck(t, dir+" (rendered)", app)
			_, k := k8sLoad(t, dir)
			image, _ := k8sList(t, app.deployment, "spec.template.spec.containers")[0]["image"].(string)
			for _, img := range k.Images {
				if want := img.NewName + ":" + img.NewTag; image != want {
					t.Errorf("rendered image %q, want %q", image, want)
				}
			}
			if k.Namespace != "" {
				if ns := k8sGet(app.deployment, "metadata.namespace"); ns != k.Namespace {
					t.Errorf("rendered namespace %v, want %s", ns, k.Namespace)
				}
			}
		})
	}
}
