package deploy_test

// Tests of the Kubernetes manifests, deploy/kubernetes: a kustomize base, components and overlays,
// rendered by kustomize's own API (what kubectl kustomize runs) and decoded strictly into the Kubernetes
// API types (and the Prometheus Operator's), as the API server would receive them. They check the Deployment's replicas, rolling update, probes,
// ports and grace period against the bridge's defaults, every BRIDGE_* name against the configuration,
// secrets as mounted files only, and the labels the PodDisruptionBudget and the Service select.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	ktypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/tracking-bridge/tracking-bridge/config"
)

// k8sRoot is the manifests' directory, relative to the repository.
const k8sRoot = "deploy/kubernetes"

// k8sDecoder decodes a manifest into its Kubernetes type by apiVersion and kind, strictly: an unknown or
// duplicate field is an error, as kubectl apply --validate=strict reports it. The Prometheus Operator's
// ServiceMonitor and PrometheusRule decode into the operator's own Go types, from which its CRDs are
// generated.
var k8sDecoder = func() runtime.Decoder {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{appsv1.AddToScheme, corev1.AddToScheme, policyv1.AddToScheme,
		networkingv1.AddToScheme, monitoringv1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}()

// k8sApp is one deployment of the bridge as the API server would receive it: the objects in the order
// they came, and those the tests look into by kind.
type k8sApp struct {
	objects        []runtime.Object
	deployment     *appsv1.Deployment
	pdb            *policyv1.PodDisruptionBudget // nil with one replica
	service        *corev1.Service
	configMaps     map[string]*corev1.ConfigMap // by name
	serviceAccount *corev1.ServiceAccount
	serviceMonitor *monitoringv1.ServiceMonitor
	prometheusRule *monitoringv1.PrometheusRule
	networkPolicy  *networkingv1.NetworkPolicy
}

// kustomize renders the kustomization in dir (relative to the repository) with kustomize's API and
// decodes every object strictly (k8sDecode).
func kustomize(t *testing.T, dir string) *k8sApp {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), repoPath(dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var docs [][]byte
	for _, r := range m.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, y)
	}
	return k8sDecode(t, dir, docs)
}

// k8sDecode decodes the manifests docs strictly, each into its Kubernetes type: exactly one Deployment
// and Service, at most one PodDisruptionBudget, ServiceAccount, ServiceMonitor, PrometheusRule and
// NetworkPolicy, and any ConfigMaps. where names them in messages.
func k8sDecode(t *testing.T, where string, docs [][]byte) *k8sApp {
	t.Helper()
	app := &k8sApp{configMaps: map[string]*corev1.ConfigMap{}}
	for _, y := range docs {
		obj, gvk, err := k8sDecoder.Decode(y, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v\n%s", where, err, y)
		}
		app.objects = append(app.objects, obj)
		dup := false
		switch o := obj.(type) {
		case *appsv1.Deployment:
			dup, app.deployment = app.deployment != nil, o
		case *policyv1.PodDisruptionBudget:
			dup, app.pdb = app.pdb != nil, o
		case *corev1.Service:
			dup, app.service = app.service != nil, o
		case *corev1.ServiceAccount:
			dup, app.serviceAccount = app.serviceAccount != nil, o
		case *monitoringv1.ServiceMonitor:
			dup, app.serviceMonitor = app.serviceMonitor != nil, o
		case *monitoringv1.PrometheusRule:
			dup, app.prometheusRule = app.prometheusRule != nil, o
		case *networkingv1.NetworkPolicy:
			dup, app.networkPolicy = app.networkPolicy != nil, o
		case *corev1.ConfigMap:
			dup = app.configMaps[o.Name] != nil
			app.configMaps[o.Name] = o
		default:
			t.Errorf("%s: unexpected kind %s", where, gvk)
		}
		if dup {
			t.Errorf("%s: a second %s", where, gvk.Kind)
		}
	}
	if app.deployment == nil || app.service == nil {
		t.Fatalf("%s: Deployment %v, Service %v; want one of each", where, app.deployment != nil, app.service != nil)
	}
	return app
}

// kustomization reads dir's kustomization.yaml with kustomize's own type, strictly, and checks that every
// YAML file beside it is one of its resources (kustomize ignores any other).
func kustomization(t *testing.T, dir string) ktypes.Kustomization {
	t.Helper()
	var k ktypes.Kustomization
	if err := k.Unmarshal([]byte(readRepo(t, dir+"/kustomization.yaml"))); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	entries, err := os.ReadDir(repoPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if ext := path.Ext(e.Name()); (ext == ".yaml" || ext == ".yml") && e.Name() != "kustomization.yaml" && !slices.Contains(k.Resources, e.Name()) {
			t.Errorf("%s/%s is not a resource of its kustomization", dir, e.Name())
		}
	}
	return k
}

// subset reports whether every label of sel is in labels with the same value, and sel is not empty.
func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
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
	case "BRIDGE_UPSTREAM_CA_FILE", "BRIDGE_NATS_CA_FILE", "BRIDGE_NATS_CERT_FILE":
		return testCert(t).cert
	case "BRIDGE_NATS_KEY_FILE":
		return testCert(t).key
	}
	t.Fatalf("%s: the test has no content for this file; add it to k8sFileContent", name)
	return ""
}

// testCertPEM is a self-signed certificate and its key, in PEM.
type testCertPEM struct{ cert, key string }

// testCert returns a certificate and key, the same for the whole test run, for the files of CA
// certificates and of a client certificate.
func testCert(t *testing.T) testCertPEM {
	t.Helper()
	c, err := makeTestCert()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var makeTestCert = sync.OnceValues(func() (testCertPEM, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return testCertPEM{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "tracking-bridge test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return testCertPEM{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return testCertPEM{}, err
	}
	return testCertPEM{
		cert: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		key:  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})),
	}, nil
})

// ptrString is *p as text, or "unset".
func ptrString[T ~string](p *T) string {
	if p == nil {
		return "unset"
	}
	return string(*p)
}

// isInt reports whether v is the number n.
func isInt(v *intstr.IntOrString, n int) bool {
	return v != nil && v.Type == intstr.Int && v.IntValue() == n
}

// k8sCheck checks one deployment of the bridge; where names it in messages. howTo is the file (relative
// to the repository) that must say how to create its Secrets, or "" when the test made them up.
func k8sCheck(t *testing.T, where string, app *k8sApp, howTo string) {
	dep := app.deployment
	if app.pdb == nil {
		t.Fatalf("%s: no PodDisruptionBudget", where)
	}

	// Replicas and rollouts: two, and a new pod ready before an old one stops.
	if r := dep.Spec.Replicas; r == nil || *r != 2 {
		t.Errorf("%s: Deployment replicas %v, want 2", where, r)
	}
	if s := dep.Spec.Strategy; s.Type != appsv1.RollingUpdateDeploymentStrategyType || s.RollingUpdate == nil ||
		!isInt(s.RollingUpdate.MaxSurge, 1) || !isInt(s.RollingUpdate.MaxUnavailable, 0) {
		t.Errorf("%s: strategy %+v; want RollingUpdate with maxSurge 1 and maxUnavailable 0", where, s)
	}

	// Labels: the Deployment, the PodDisruptionBudget and the Service select the pods.
	podLabels := dep.Spec.Template.Labels
	var depSel, pdbSel map[string]string
	if dep.Spec.Selector != nil {
		depSel = dep.Spec.Selector.MatchLabels
	}
	if app.pdb.Spec.Selector != nil {
		pdbSel = app.pdb.Spec.Selector.MatchLabels
	}
	for what, sel := range map[string]map[string]string{
		"the Deployment's selector":          depSel,
		"the PodDisruptionBudget's selector": pdbSel,
		"the Service's selector":             app.service.Spec.Selector,
	} {
		if !subset(sel, podLabels) {
			t.Errorf("%s: %s %v does not select the pods %v", where, what, sel, podLabels)
		}
	}
	if m := app.pdb.Spec.MinAvailable; !isInt(m, 1) {
		t.Errorf("%s: PodDisruptionBudget minAvailable %v, want 1", where, m)
	}
	// Not ready pods may be evicted: when NATS or the auth server is down none is ready, and with the
	// default policy (IfHealthyBudget) a node drain would wait for the outage to end.
	if p := app.pdb.Spec.UnhealthyPodEvictionPolicy; p == nil || *p != policyv1.AlwaysAllow {
		t.Errorf("%s: PodDisruptionBudget unhealthyPodEvictionPolicy %v, want %s", where, ptrString(p), policyv1.AlwaysAllow)
	}

	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%s: %d containers, want the bridge alone", where, len(pod.Containers))
	}
	c := pod.Containers[0]
	if len(c.Command) > 0 {
		t.Errorf("%s: the container's command %q overrides the image's entrypoint (the binary)", where, c.Command)
	}
	if len(c.Args) > 0 && c.Args[0] != "run" {
		t.Errorf("%s: the container's args %q; the daemon is run (the image's default command)", where, c.Args)
	}

	// The environment: the ConfigMap's variables and the container's own, all of them the bridge's.
	known, secretVars := bridgeVars(t)
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		if from.SecretRef != nil {
			t.Errorf("%s: envFrom a Secret: secrets must come as files", where)
		}
		if from.ConfigMapRef == nil {
			continue
		}
		cm, ok := app.configMaps[from.ConfigMapRef.Name]
		if !ok {
			t.Fatalf("%s: envFrom ConfigMap %q, which is not generated", where, from.ConfigMapRef.Name)
		}
		for k, v := range cm.Data {
			if !known[k] {
				t.Errorf("%s: ConfigMap %s sets %s, which the bridge does not read", where, cm.Name, k)
			}
			if secretVars[k] {
				t.Errorf("%s: ConfigMap %s sets %s: secrets come from mounted Secrets", where, cm.Name, k)
			}
			env[k] = v
		}
	}
	fileVars := map[string]string{}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, config.Prefix+"_") && !known[e.Name] {
			t.Errorf("%s: env sets %s, which the bridge does not read", where, e.Name)
		}
		if e.ValueFrom != nil {
			if e.ValueFrom.SecretKeyRef != nil {
				t.Errorf("%s: %s comes from a Secret as a value; mount the Secret and set the _FILE variable", where, e.Name)
			} else {
				t.Errorf("%s: env %s has no plain value", where, e.Name)
			}
			continue
		}
		if _, dup := env[e.Name]; dup {
			t.Errorf("%s: %s is set in both the ConfigMap and the container", where, e.Name)
		}
		env[e.Name] = e.Value
		if strings.HasSuffix(e.Name, "_FILE") {
			fileVars[e.Name] = e.Value
		}
	}
	for name := range env {
		if secretVars[name] && !strings.HasSuffix(name, "_FILE") {
			t.Errorf("%s: %s is set as a value; set %s_FILE to a mounted Secret's file", where, name, name)
		}
	}
	checkReplicaVars(t, where, env, 0)

	// Every file the variables name is in a read-only mount: a Secret's for secrets.
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	secretFiles := map[string][]string{} // Secret name -> keys the variables read
	for name, p := range fileVars {
		i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return path.Dir(p) == path.Clean(m.MountPath) })
		if i < 0 {
			t.Errorf("%s: %s=%s is in no volume mount", where, name, p)
			continue
		}
		mount := c.VolumeMounts[i]
		if !mount.ReadOnly {
			t.Errorf("%s: the mount of %s is not readOnly", where, name)
		}
		var secret string
		if s := volumes[mount.Name].Secret; s != nil {
			secret = s.SecretName
		}
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
	cfg, err := loadConfig(t, loadEnv)
	if err != nil {
		t.Fatalf("%s: the configuration does not load:\n%v", where, err)
	}

	// The HTTP port: the container's, the probes', the Service's.
	_, httpPort, _ := net.SplitHostPort(cfg.HTTPAddr)
	var portName string
	for _, p := range c.Ports {
		if fmt.Sprint(p.ContainerPort) == httpPort {
			portName = p.Name
		}
	}
	if portName == "" {
		t.Fatalf("%s: no named container port %s (BRIDGE_HTTP_ADDR)", where, httpPort)
	}
	toHTTP := func(p intstr.IntOrString) bool { return p.String() == portName || p.String() == httpPort }
	for probe, want := range map[string]struct {
		p    *corev1.Probe
		path string
	}{"livenessProbe": {c.LivenessProbe, "/healthz"}, "readinessProbe": {c.ReadinessProbe, "/readyz"}, "startupProbe": {c.StartupProbe, "/healthz"}} {
		if want.p == nil {
			if probe != "startupProbe" {
				t.Errorf("%s: no %s", where, probe)
			}
			continue
		}
		if g := want.p.HTTPGet; g == nil || g.Path != want.path || !toHTTP(g.Port) {
			got := "not an HTTP GET"
			if g != nil {
				got = fmt.Sprintf("GET %s on %s", g.Path, g.Port.String())
			}
			t.Errorf("%s: %s is %s, want GET %s on %s (%s)", where, probe, got, want.path, portName, httpPort)
		}
	}
	if p := c.ReadinessProbe; p != nil && time.Duration(p.TimeoutSeconds)*time.Second <= readyzTimeout(t) {
		t.Errorf("%s: readinessProbe timeoutSeconds %d; /readyz may take %v (internal/daemon/health.go), want more",
			where, p.TimeoutSeconds, readyzTimeout(t))
	}
	if !slices.ContainsFunc(app.service.Spec.Ports, func(p corev1.ServicePort) bool { return toHTTP(p.TargetPort) }) {
		t.Errorf("%s: the Service has no port to %s", where, portName)
	}

	// Stopping: longer than BRIDGE_SHUTDOWN_TIMEOUT plus what the process allows itself past it.
	var grace time.Duration
	if g := pod.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	if limit := cfg.ShutdownTimeout + shutdownGrace(t); grace <= limit {
		t.Errorf("%s: terminationGracePeriodSeconds %v, want more than %v (BRIDGE_SHUTDOWN_TIMEOUT %v plus %v)",
			where, grace, limit, cfg.ShutdownTimeout, shutdownGrace(t))
	}

	// Security: non-root, read-only, no privileges, and resources.
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("%s: the pod does not set runAsNonRoot", where)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("%s: container securityContext %+v; want readOnlyRootFilesystem, no privilege escalation, capabilities drop [ALL]", where, sc)
	}
	has := func(l corev1.ResourceList, r corev1.ResourceName) bool { _, ok := l[r]; return ok }
	for key, ok := range map[string]bool{
		"resources.requests.cpu":    has(c.Resources.Requests, corev1.ResourceCPU),
		"resources.requests.memory": has(c.Resources.Requests, corev1.ResourceMemory),
		"resources.limits.memory":   has(c.Resources.Limits, corev1.ResourceMemory),
	} {
		if !ok {
			t.Errorf("%s: container has no %s", where, key)
		}
	}

	// The Secrets are created as howTo says, with the keys the variables read.
	if howTo == "" {
		return
	}
	header := readRepo(t, howTo)
	for secret, keys := range secretFiles {
		for _, key := range keys {
			if cmd := "kubectl create secret generic " + secret + " --from-file=" + key + "="; !strings.Contains(header, cmd) {
				t.Errorf("%s: %s does not say how to create Secret %s with key %s (%q)", where, howTo, secret, key, cmd)
			}
		}
	}
}

// kustomizations returns every directory under deploy/kubernetes with a kustomization.yaml, and checks
// every file there for BRIDGE_* names the bridge does not read.
func kustomizations(t *testing.T) []string {
	t.Helper()
	var dirs []string
	known, _ := bridgeVars(t)
	err := filepath.WalkDir(repoPath(k8sRoot), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(repoPath("."), p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.Name() == "kustomization.yaml" {
			dirs = append(dirs, path.Dir(rel))
		}
		checkNames(t, rel, known)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(dirs)
	return dirs
}

// TestKustomize renders the base and every overlay with kustomize and checks each as the API server
// would receive it (the generated ConfigMap under its hashed name, the image and namespace as an overlay
// sets them).
func TestKustomize(t *testing.T) {
	dirs := kustomizations(t)
	if !slices.Contains(dirs, k8sRoot+"/base") {
		t.Fatalf("no %s/base/kustomization.yaml (found %q)", k8sRoot, dirs)
	}
	used := map[string]bool{} // the components the overlays use
	for _, dir := range dirs {
		for _, c := range kustomization(t, dir).Components {
			used[path.Join(dir, c)] = true
		}
	}
	for _, dir := range dirs {
		t.Run(strings.TrimPrefix(dir, k8sRoot+"/"), func(t *testing.T) {
			k := kustomization(t, dir)
			if k.Kind == ktypes.ComponentKind {
				// A component is rendered, and checked, as part of the overlays that use it.
				if !used[dir] {
					t.Errorf("%s: a component that no overlay uses, so no test renders it", dir)
				}
				return
			}
			app := kustomize(t, dir)
			k8sCheck(t, dir, app, k8sRoot+"/base/kustomization.yaml")
			checkAddOns(t, dir, app)
			if dir == k8sRoot+"/base" {
				return
			}
			if k.Namespace == "" || len(k.Images) == 0 {
				t.Errorf("%s: an overlay should set the namespace and the image", dir)
			}
			image := app.deployment.Spec.Template.Spec.Containers[0].Image
			for _, img := range k.Images {
				if want := img.NewName + ":" + img.NewTag; image != want {
					t.Errorf("%s: rendered image %q, want %q", dir, image, want)
				}
			}
			if ns := app.deployment.Namespace; k.Namespace != "" && ns != k.Namespace {
				t.Errorf("%s: rendered namespace %q, want %s", dir, ns, k.Namespace)
			}
		})
	}
}

// TestK8sDecoderStrict: the decoder the tests use refuses what the API server would, so that a misspelt
// field in a manifest fails TestKustomize rather than being dropped.
func TestK8sDecoderStrict(t *testing.T) {
	for name, manifest := range map[string]string{
		"unknown field":   "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replica: 2}\n",
		"duplicate field": "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {type: ClusterIP, type: NodePort}\n",
		"wrong type":      "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: x}\nspec: {selector: one}\n",
		"unknown kind":    "apiVersion: apps/v1\nkind: Deploymnet\nmetadata: {name: x}\n",
	} {
		if _, _, err := k8sDecoder.Decode([]byte(manifest), nil, nil); err == nil {
			t.Errorf("%s: decoded without an error", name)
		}
	}
}

// TestKubernetesDocs: what docs/operations.md and the base's kustomization.yaml tell to run works with
// the example overlay, and what they say of the manifests is what the base renders. The overlay's
// namespace is created, and the Secrets created in it (kubectl apply -k fails without the namespace,
// and the pods do not start without the Secrets); a changed Secret is followed by a rollout restart (the
// bridge reads its files at start-up); a move to the chart deletes the kustomize objects first (the
// selectors differ); the resources quoted are the base's, and there is no strategy but the rolling
// update the tests require.
func TestKubernetesDocs(t *testing.T) {
	doc := readRepo(t, "docs/operations.md")
	_, k8sDoc, ok := strings.Cut(doc, "\n## Kubernetes\n")
	k8sDoc, _, _ = strings.Cut(k8sDoc, "\n## Running replicas\n")
	_, baseDoc, ok2 := strings.Cut(doc, "\n### The Kubernetes base\n")
	baseDoc, _, _ = strings.Cut(baseDoc, "\n### The Helm chart\n")
	if !ok || !ok2 {
		t.Fatal("docs/operations.md has no section Kubernetes or The Kubernetes base")
	}
	base := kustomize(t, k8sRoot+"/base")
	deployment := base.deployment.Name
	ns := kustomization(t, k8sRoot+"/overlays/example").Namespace
	if ns == "" {
		t.Fatalf("%s/overlays/example sets no namespace", k8sRoot)
	}
	for where, text := range map[string]string{
		"docs/operations.md, The Kubernetes base": baseDoc,
		k8sRoot + "/base/kustomization.yaml":      readRepo(t, k8sRoot+"/base/kustomization.yaml"),
	} {
		if !strings.Contains(text, "kubectl create namespace "+ns) {
			t.Errorf("%s: does not create the overlay's namespace (kubectl create namespace %s)", where, ns)
		}
		secrets := 0
		for line := range strings.Lines(text) {
			if strings.Contains(line, "kubectl create secret") {
				secrets++
				if !strings.Contains(line, " -n "+ns) {
					t.Errorf("%s: a Secret created outside the overlay's namespace %s:\n%s", where, ns, line)
				}
			}
		}
		if secrets == 0 {
			t.Errorf("%s: creates no Secret", where)
		}
		if !strings.Contains(text, "kubectl rollout restart deployment/"+deployment+" -n "+ns) {
			t.Errorf("%s: does not say to restart the pods after changing a Secret (kubectl rollout restart deployment/%s -n %s)",
				where, deployment, ns)
		}
	}
	// The chart's Deployment selects by app.kubernetes.io/instance too, and a selector cannot change.
	if _, helmDoc, _ := strings.Cut(doc, "\n### The Helm chart\n"); !strings.Contains(helmDoc, "kubectl delete -k") {
		t.Error("docs/operations.md, The Helm chart: does not say to delete the kustomize install's objects before installing the chart")
	}
	if strings.Contains(k8sDoc, "Recreate") {
		t.Error("docs/operations.md, Kubernetes: names the Recreate strategy, which neither the chart nor the tests allow")
	}
	res := base.deployment.Spec.Template.Spec.Containers[0].Resources
	for what, q := range map[string]string{
		"cpu":    res.Requests.Cpu().String(),
		"memory": res.Requests.Memory().String(),
	} {
		if want := "`" + what + ": " + q + "`"; !strings.Contains(k8sDoc, want) {
			t.Errorf("docs/operations.md, Kubernetes: does not give the base's request %s", want)
		}
	}
}
