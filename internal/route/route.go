// Package route is the one routing function of the cluster: it maps a key (a consumer
// group id or a transactional.id) to the broker that coordinates it.
//
// It owns no state and does no I/O; every broker and the controller call this same
// function with the same inputs and so compute the same answer (spec coordination.md
// §2, trap 11). It imports the standard library only and must not import any other
// kaas package. The rules, the fallback weight function and the test vectors are in
// docs/routing.md.
package route

import (
	"hash/fnv"
	"sort"
)

// FNV1a32 is the 32-bit FNV-1a hash of the bytes of key (offset basis 0x811c9dc5,
// prime 0x01000193), the same value as hash/fnv.New32a.
func FNV1a32(key string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(key)) // never fails
	return h.Sum32()
}

// fnv1a32 is the allocation-free twin of FNV1a32 used on the hot path; the tests
// check that both agree.
func fnv1a32(key string) uint32 {
	const (
		basis = 0x811c9dc5
		prime = 0x01000193
	)
	h := uint32(basis)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= prime
	}
	return h
}

// Weight is the rendezvous (highest-random-weight) weight of broker for key:
//
//	Weight(key, broker) = mix64(FNV-1a-64(key || 0x00 || broker))
//
// where FNV-1a-64 has offset basis 0xcbf29ce484222325 and prime 0x100000001b3, and
// mix64 is the SplitMix64 finalizer
//
//	z ^= z >> 30; z *= 0xbf58476d1ce4e5b9
//	z ^= z >> 27; z *= 0x94d049bb133111eb
//	z ^= z >> 31
//
// The finalizer matters: raw FNV-1a of strings that differ only in their last bytes
// (kaas-1, kaas-2, ...) differ mostly in low bits, which would bias the comparison.
func Weight(key, broker string) uint64 {
	const (
		basis = 0xcbf29ce484222325
		prime = 0x100000001b3
	)
	h := uint64(basis)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= prime
	}
	h ^= 0 // the 0x00 separator byte
	h *= prime
	for i := 0; i < len(broker); i++ {
		h ^= uint64(broker[i])
		h *= prime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// sortedSet returns brokers sorted with sort.Strings and without duplicates. It
// returns brokers itself when it is already in that form, so the common call (the
// caller keeps its broker list sorted) does not allocate.
func sortedSet(brokers []string) []string {
	ok := true
	for i := 1; i < len(brokers); i++ {
		if brokers[i-1] >= brokers[i] {
			ok = false
			break
		}
	}
	if ok {
		return brokers
	}
	ids := append([]string(nil), brokers...)
	sort.Strings(ids)
	out := ids[:0]
	for i, id := range ids {
		if i > 0 && id == ids[i-1] {
			continue
		}
		out = append(out, id)
	}
	return out
}

// Preferred returns the hash slot of key over the full broker set, ignoring
// liveness: ids[uint64(FNV1a32(key)) % len(ids)] with ids = the distinct brokers
// sorted by sort.Strings (so kaas-10 sorts before kaas-2). It returns "" when
// brokers is empty. The controller mints explicit group placements with it.
func Preferred(key string, brokers []string) string {
	ids := sortedSet(brokers)
	if len(ids) == 0 {
		return ""
	}
	return ids[uint64(fnv1a32(key))%uint64(len(ids))]
}

// Coordinator returns the broker that coordinates key.
//
// brokers is the full broker set (every broker row of assignment.json, including
// draining and dead rows, in any order; duplicates are ignored), never only the
// alive ones: the divisor of the hash slot must not change when a broker dies.
// alive reports whether a broker counts as alive (health "alive").
//
// The preferred broker (see Preferred) answers when it is alive. Otherwise the
// alive broker with the highest Weight(key, id) answers, ties broken by the smaller
// id. ok is false when no broker is alive or brokers is empty.
func Coordinator(key string, brokers []string, alive func(id string) bool) (id string, ok bool) {
	ids := sortedSet(brokers)
	if len(ids) == 0 {
		return "", false
	}
	pref := ids[uint64(fnv1a32(key))%uint64(len(ids))]
	if alive(pref) {
		return pref, true
	}
	var best uint64
	for _, b := range ids {
		if b == pref || !alive(b) {
			continue
		}
		// ids is sorted ascending, so on equal weights the first (smaller) id stays.
		if w := Weight(key, b); !ok || w > best {
			id, best, ok = b, w, true
		}
	}
	return id, ok
}
