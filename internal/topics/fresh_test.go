package topics

import "testing"

// TestFreshShowsAnotherRegistrysAlterAtOnce: a change written by one
// broker's registry (the controller's alter) is what Fresh returns on
// another at once, while Get keeps the cached copy until a refresh; a topic
// deleted there is gone for Fresh, and an unchanged file is not read again.
func TestFreshShowsAnotherRegistrysAlterAtOnce(t *testing.T) {
	dir := t.TempDir()
	ctrl, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctrl.Create("logs", 1, map[string]string{"cleanup.policy": "compact"}, false); err != nil {
		t.Fatal(err)
	}
	if tp, ok := other.Fresh("logs"); !ok || tp.Configs["cleanup.policy"] != "compact" {
		t.Fatalf("Fresh before the alter: %+v %v", tp, ok)
	}
	ms := "1000"
	if _, err := ctrl.AlterConfigs("logs", []ConfigOp{{Name: "retention.ms", Op: OpSet, Value: &ms}}, false); err != nil {
		t.Fatal(err)
	}
	if tp, _ := other.Get("logs"); tp.Configs["retention.ms"] != "" {
		t.Fatalf("Get read the file again: %v (the test expects the cached copy)", tp.Configs)
	}
	tp, ok := other.Fresh("logs")
	if !ok || tp.Configs["retention.ms"] != "1000" || tp.Configs["cleanup.policy"] != "compact" {
		t.Fatalf("Fresh after the alter: %+v %v, want retention.ms=1000 and cleanup.policy=compact", tp, ok)
	}
	if again, _ := other.Fresh("logs"); again != tp {
		t.Fatal("Fresh read an unchanged file again")
	}
	if got, _ := other.Get("logs"); got != tp {
		t.Fatal("Get does not return what Fresh cached")
	}
	if _, err := ctrl.Delete("logs"); err != nil {
		t.Fatal(err)
	}
	if tp, ok := other.Fresh("logs"); ok {
		t.Fatalf("Fresh of a deleted topic: %+v", tp)
	}
	if _, ok := other.Fresh("../escape"); ok {
		t.Fatal("Fresh of an invalid name")
	}
}
