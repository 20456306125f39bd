package k8slease

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"slices"
	"sort"
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

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
)

const chartDir = "../../../deploy/helm/kaas"

// renderChart renders the Helm chart with Helm's own library, as `helm
// template prod deploy/helm/kaas -n data` would, and decodes every manifest
// strictly into typed objects.
func renderChart(t *testing.T, values map[string]any) []runtime.Object {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := chartutil.ValidateAgainstSchema(ch, values); err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{Name: "prod", Namespace: "data", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	out, err := engine.Render(ch, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	var names []string
	for name := range out {
		names = append(names, name)
	}
	sort.Strings(names)
	decoder := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	var objs []runtime.Object
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") || strings.HasSuffix(name, ".tpl") {
			continue
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader([]byte(out[name]))))
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
				t.Fatalf("%s: %v\n%s", name, err, doc)
			}
			objs = append(objs, obj)
		}
	}
	return objs
}

func envOf(c corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

// TestHelmChartRendersTheManifests: the chart's defaults give what the
// plain manifests give (one shared RWX claim, the id from the pod ordinal,
// HTTP probes on the admin port, the restricted security contexts,
// GOMEMLIMIT below the memory limit, a disruption budget, the Lease's
// Role); its values change the size, the storage class, the resources, the
// election backend and the admin port.
func TestHelmChartRendersTheManifests(t *testing.T) {
	objs := renderChart(t, nil)
	sts := only[*appsv1.StatefulSet](t, objs, "prod-kaas")
	pvc := only[*corev1.PersistentVolumeClaim](t, objs, "prod-kaas-data")
	only[*corev1.Service](t, objs, "prod-kaas")
	headless := only[*corev1.Service](t, objs, "prod-kaas-headless")
	only[*rbacv1.Role](t, objs, "prod-kaas-election")
	only[*policyv1.PodDisruptionBudget](t, objs, "prod-kaas")
	if *sts.Spec.Replicas != 3 || sts.Spec.ServiceName != headless.Name || len(sts.Spec.VolumeClaimTemplates) != 0 {
		t.Errorf("statefulset: %d replicas, service %q, %d claim templates", *sts.Spec.Replicas, sts.Spec.ServiceName, len(sts.Spec.VolumeClaimTemplates))
	}
	if !slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}) || pvc.Spec.StorageClassName != nil {
		t.Errorf("claim %+v: want one ReadWriteMany claim of the default class", pvc.Spec)
	}
	if v := sts.Spec.Template.Spec.Volumes; len(v) != 1 || v[0].PersistentVolumeClaim == nil || v[0].PersistentVolumeClaim.ClaimName != pvc.Name {
		t.Errorf("volumes %+v: want the shared claim", v)
	}
	c := sts.Spec.Template.Spec.Containers[0]
	env := envOf(c)
	if env["KAAS_ELECTION"] != "kubernetes" || env["KAAS_ADMIN_LISTEN"] != "0.0.0.0:9644" ||
		env["KAAS_ADVERTISE"] != "$(POD_NAME).prod-kaas-headless.$(POD_NAMESPACE).svc:9092" || env["GOMEMLIMIT"] != "900MiB" {
		t.Errorf("env %v", env)
	}
	if !strings.Contains(strings.Join(c.Args, " "), `--id "${POD_NAME##*-}"`) {
		t.Errorf("args %q do not derive --id from the pod's ordinal", c.Args)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.String() != "admin" {
		t.Errorf("readiness probe %+v", p)
	}
	if cs := c.SecurityContext; cs == nil || cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem ||
		cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation {
		t.Errorf("container security context %+v", cs)
	}
	if lim := c.Resources.Limits.Memory(); lim.String() != "1Gi" {
		t.Errorf("memory limit %v", lim)
	}

	// Values: size, storage, resources, the file election, the admin port.
	objs = renderChart(t, map[string]any{
		"replicas": 5,
		"storage":  map[string]any{"storageClassName": "nfs-csi", "size": "200Gi"},
		"election": "file",
		"ports":    map[string]any{"admin": 9700},
		"resources": map[string]any{"requests": map[string]any{"cpu": "2", "memory": "2Gi"},
			"limits": map[string]any{"memory": "4Gi"}},
		"goMemLimit": "3600MiB",
		"extraEnv":   map[string]any{"KAAS_AUTO_CREATE_TOPICS": "true"},
	})
	sts = only[*appsv1.StatefulSet](t, objs, "prod-kaas")
	pvc = only[*corev1.PersistentVolumeClaim](t, objs, "prod-kaas-data")
	c = sts.Spec.Template.Spec.Containers[0]
	env = envOf(c)
	if *sts.Spec.Replicas != 5 || pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "nfs-csi" ||
		pvc.Spec.Resources.Requests.Storage().String() != "200Gi" {
		t.Errorf("size or storage not applied: %d replicas, claim %+v", *sts.Spec.Replicas, pvc.Spec)
	}
	if env["KAAS_ELECTION"] != "file" || env["KAAS_ADMIN_LISTEN"] != "0.0.0.0:9700" || env["KAAS_AUTO_CREATE_TOPICS"] != "true" ||
		sts.Spec.Template.Annotations["prometheus.io/port"] != "9700" || c.Ports[2].ContainerPort != 9700 {
		t.Errorf("election, admin port or extra env not applied: %v %v", env, sts.Spec.Template.Annotations)
	}
	if c.Resources.Limits.Memory().String() != "4Gi" || c.Resources.Requests.Cpu().String() != "2" {
		t.Errorf("resources not applied: %+v", c.Resources)
	}
	for _, o := range objs {
		if r, ok := o.(*rbacv1.Role); ok {
			t.Errorf("the file election needs no Role, got %s", r.Name)
		}
	}
}
