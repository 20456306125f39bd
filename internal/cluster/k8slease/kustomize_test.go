package k8slease

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// TestDocumentedOverlayRenders renders the overlay example of
// docs/kubernetes.md ("Deploying", step 2) over deploy/ with kustomize's own
// library, as `kubectl apply -k my-kaas/` would, and checks that it sets
// what it says: the image and the claim's storage class.
func TestDocumentedOverlayRenders(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(\\s*# my-kaas/kustomization.yaml\n.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/kubernetes.md has no my-kaas/kustomization.yaml example")
	}
	var overlay strings.Builder
	for _, line := range strings.Split(string(m[1]), "\n") {
		overlay.WriteString(strings.TrimPrefix(line, "   ") + "\n") // the list item's indent
	}

	fs := filesys.MakeFsInMemory()
	names, err := filepath.Glob(filepath.Join(deployDir, "*.yaml"))
	if err != nil || len(names) == 0 {
		t.Fatalf("deploy/*.yaml: %v", err)
	}
	for _, n := range names {
		data, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := fs.WriteFile(filepath.Join("/repo/deploy", filepath.Base(n)), data); err != nil {
			t.Fatal(err)
		}
	}
	if err := fs.WriteFile("/repo/my-kaas/kustomization.yaml", []byte(overlay.String())); err != nil {
		t.Fatal(err)
	}
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, "/repo/my-kaas")
	if err != nil {
		t.Fatalf("kustomize build my-kaas: %v\n%s", err, overlay.String())
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	y := string(out)
	if !strings.Contains(y, "image: registry.example.com/kaas:v1") || strings.Contains(y, "ghcr.io/kaas-dev/kaas") {
		t.Errorf("the overlay does not set the image:\n%s", y)
	}
	if !strings.Contains(y, "storageClassName: nfs-csi") {
		t.Errorf("the overlay does not set the claim's storage class:\n%s", y)
	}
	if !strings.Contains(y, "kind: PodDisruptionBudget") {
		t.Errorf("the overlay lost the base's disruption budget")
	}
}
