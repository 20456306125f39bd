package topics

import (
	"fmt"
	"sync"
	"testing"
)

// TestRefreshBesideCreateAndDeleteLosesNothing: the cluster loop refreshes
// the registry while clients create and delete topics on the same broker.
// Refresh read the registry's maps after letting go of its lock while
// Create and Delete wrote them in place (the race detector caught it in CI,
// kafkatools.TestKafkaTransactions), and it put back maps built from a
// directory listing older than a create or delete that had meanwhile
// updated them: a topic just created was unknown by id, one just deleted
// known again, until the next refresh.
func TestRefreshBesideCreateAndDeleteLosesNothing(t *testing.T) {
	r, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := r.Refresh(); err != nil {
				t.Error(err)
				return
			}
		}
	})
	created := map[string]*Topic{}
	for i := range 60 {
		name := fmt.Sprintf("t-%d", i)
		tp, err := r.Create(name, 1, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		created[name] = tp
		if i%3 == 2 {
			if _, err := r.Delete(fmt.Sprintf("t-%d", i-1)); err != nil {
				t.Fatal(err)
			}
			delete(created, fmt.Sprintf("t-%d", i-1))
		}
	}
	close(stop)
	wg.Wait()
	for name, tp := range created {
		if _, ok := r.ByID(tp.ID); !ok {
			t.Errorf("%s, created, unknown by id", name)
		}
	}
	for i := 1; i < 60; i += 3 {
		name := fmt.Sprintf("t-%d", i)
		for _, tp := range r.All() {
			if tp.Name == name {
				t.Errorf("%s, deleted, still listed", name)
			}
		}
	}
}
