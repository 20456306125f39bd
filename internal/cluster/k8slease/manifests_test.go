package k8slease

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

const deployDir = "../../../deploy"

// loadManifests decodes every resource the kustomization lists into typed
// objects, strictly: an unknown or misspelt field fails the test.
func loadManifests(t *testing.T) []runtime.Object {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(deployDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(raw, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if len(k.Resources) == 0 {
		t.Fatal("kustomization.yaml lists no resources")
	}
	decoder := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	var out []runtime.Object
	for _, name := range k.Resources {
		data, err := os.ReadFile(filepath.Join(deployDir, name))
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			obj, _, err := decoder.Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			out = append(out, obj)
		}
	}
	return out
}

func only[T runtime.Object](t *testing.T, objs []runtime.Object, name string) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			found = append(found, v)
		}
	}
	for _, v := range found {
		if m, ok := any(v).(interface{ GetName() string }); ok && m.GetName() == name {
			return v
		}
	}
	var zero T
	t.Fatalf("no %T named %q in deploy/", zero, name)
	return zero
}

func TestManifestsDecodeAndFitTogether(t *testing.T) {
	objs := loadManifests(t)
	sts := only[*appsv1.StatefulSet](t, objs, "kaas")
	pvc := only[*corev1.PersistentVolumeClaim](t, objs, "kaas-data")
	headless := only[*corev1.Service](t, objs, sts.Spec.ServiceName)
	only[*corev1.Service](t, objs, "kaas")
	sa := only[*corev1.ServiceAccount](t, objs, sts.Spec.Template.Spec.ServiceAccountName)
	role := only[*rbacv1.Role](t, objs, "kaas-election")
	rb := only[*rbacv1.RoleBinding](t, objs, "kaas-election")

	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Errorf("replicas = %v, want 3", sts.Spec.Replicas)
	}
	if len(sts.Spec.VolumeClaimTemplates) != 0 {
		t.Error("volumeClaimTemplates would give each broker its own volume; the brokers must share one")
	}
	if !slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}) {
		t.Errorf("PVC access modes = %v, want [ReadWriteMany]", pvc.Spec.AccessModes)
	}
	if headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("%s: clusterIP %q publishNotReadyAddresses %v, want headless and publishing", headless.Name,
			headless.Spec.ClusterIP, headless.Spec.PublishNotReadyAddresses)
	}
	pod := sts.Spec.Template.Spec
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g <= 30 {
		t.Errorf("terminationGracePeriodSeconds = %v, want more than the 30 s drain", g)
	}
	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Error("enableServiceLinks must be false: the Service named kaas would inject KAAS_* variables")
	}
	var dataVolume string
	for _, v := range pod.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == pvc.Name {
			dataVolume = v.Name
		}
	}
	if dataVolume == "" {
		t.Fatalf("no pod volume uses the claim %s", pvc.Name)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if e := env["POD_NAME"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Error("POD_NAME must come from metadata.name")
	}
	if got := env["KAAS_ELECTION"].Value; got != "kubernetes" {
		t.Errorf("KAAS_ELECTION = %q", got)
	}
	if got, want := env["KAAS_ADVERTISE"].Value, "$(POD_NAME)."+headless.Name+".$(POD_NAMESPACE).svc:9092"; got != want {
		t.Errorf("KAAS_ADVERTISE = %q, want %q", got, want)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.Name == dataVolume && m.MountPath == env["KAAS_DATA_DIR"].Value {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("the shared claim is not mounted at KAAS_DATA_DIR (%q)", env["KAAS_DATA_DIR"].Value)
	}
	if cmd := strings.Join(append(c.Command, c.Args...), " "); !strings.Contains(cmd, `--id "${POD_NAME##*-}"`) {
		t.Errorf("command %q does not derive --id from the pod's ordinal", cmd)
	}
	for name, want := range map[string]string{"readiness": "/readyz", "liveness": "/healthz"} {
		p := c.ReadinessProbe
		if name == "liveness" {
			p = c.LivenessProbe
		}
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want || p.HTTPGet.Port.String() != "admin" {
			t.Errorf("%s probe must GET %s on the admin port: %+v", name, want, p)
		}
	}
	if len(c.Ports) != 3 || c.Ports[0].ContainerPort != 9092 || c.Ports[0].Name != "kafka" ||
		c.Ports[1].ContainerPort != 9093 || c.Ports[1].Name != "cluster" ||
		c.Ports[2].ContainerPort != 9644 || c.Ports[2].Name != "admin" {
		t.Errorf("ports = %+v, want kafka 9092, cluster 9093 and admin 9644", c.Ports)
	}
	if got := env["KAAS_ADMIN_LISTEN"].Value; got != "0.0.0.0:9644" {
		t.Errorf("KAAS_ADMIN_LISTEN = %q, want the admin port 9644", got)
	}
	if a := sts.Spec.Template.Annotations; a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != "9644" {
		t.Errorf("pod annotations %v do not point a scraper at the admin port", a)
	}
	// The restricted Pod Security Standard.
	ps, cs := sts.Spec.Template.Spec.SecurityContext, c.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v: want non-root and the RuntimeDefault seccomp profile", ps)
	}
	if cs == nil || cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation || cs.ReadOnlyRootFilesystem == nil ||
		!*cs.ReadOnlyRootFilesystem || cs.Capabilities == nil || !slices.Equal(cs.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container security context %+v: want no privilege escalation, a read-only root and every capability dropped", cs)
	}
	limit := c.Resources.Limits.Memory()
	if limit.IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
		t.Errorf("resources %+v: want requests and a memory limit", c.Resources)
	}
	memLimit, err := parseGoMemLimit(env["GOMEMLIMIT"].Value)
	if err != nil || memLimit >= limit.Value() || memLimit < limit.Value()*8/10 {
		t.Errorf("GOMEMLIMIT %q (%v): want a little below the memory limit %s", env["GOMEMLIMIT"].Value, err, limit)
	}
	if tsc := sts.Spec.Template.Spec.TopologySpreadConstraints; len(tsc) != 1 || tsc[0].TopologyKey != "kubernetes.io/hostname" {
		t.Errorf("topology spread %+v: want the brokers spread over nodes", tsc)
	}
	pdb := only[*policyv1.PodDisruptionBudget](t, objs, "kaas")
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 ||
		pdb.Spec.Selector == nil || pdb.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != "kaas" {
		t.Errorf("PodDisruptionBudget %+v: want at most one broker down, selecting the brokers", pdb.Spec)
	}
	clusterListen := ""
	for _, e := range c.Env {
		if e.Name == "KAAS_CLUSTER_LISTEN" {
			clusterListen = e.Value
		}
	}
	if !strings.HasSuffix(clusterListen, ":9093") {
		t.Errorf("KAAS_CLUSTER_LISTEN = %q, want the cluster port 9093", clusterListen)
	}

	verbs := map[string]bool{}
	for _, r := range role.Rules {
		if slices.Contains(r.APIGroups, "coordination.k8s.io") && slices.Contains(r.Resources, "leases") {
			for _, v := range r.Verbs {
				verbs[v] = true
			}
		}
	}
	for _, v := range []string{"get", "create", "update"} {
		if !verbs[v] {
			t.Errorf("the Role does not grant %s on leases", v)
		}
	}
	if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name {
		t.Errorf("RoleBinding refers to %s %s", rb.RoleRef.Kind, rb.RoleRef.Name)
	}
	if len(rb.Subjects) != 1 || rb.Subjects[0].Kind != "ServiceAccount" || rb.Subjects[0].Name != sa.Name {
		t.Errorf("RoleBinding subjects = %+v, want the ServiceAccount %s", rb.Subjects, sa.Name)
	}
}

// parseGoMemLimit reads GOMEMLIMIT's forms used here: a number of bytes with
// an optional KiB, MiB or GiB suffix.
func parseGoMemLimit(v string) (int64, error) {
	mult := int64(1)
	for suffix, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if n, ok := strings.CutSuffix(v, suffix); ok {
			v, mult = n, m
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n * mult, err
}

// TestDockerignoreKeepsTheBuildContextClean: the image builds from the
// tracked tree only: .dockerignore leaves out .git and everything
// .gitignore ignores (binaries, the conformance caches, Kafka's jars).
func TestDockerignoreKeepsTheBuildContextClean(t *testing.T) {
	read := func(name string) []string {
		data, err := os.ReadFile(filepath.Join(deployDir, "..", name))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range strings.Split(string(data), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				out = append(out, l)
			}
		}
		return out
	}
	docker := read(".dockerignore")
	for _, want := range append(read(".gitignore"), ".git") {
		if !slices.Contains(docker, want) {
			t.Errorf(".dockerignore does not leave out %q (.gitignore does)", want)
		}
	}
}
