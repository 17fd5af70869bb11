package keyed

import "sync"

// Mutex is one lock per key; the zero value is ready. A key's entry lives
// only while its lock is held or waited for.
type Mutex struct {
	mu sync.Mutex
	m  map[string]*entry
}

type entry struct {
	mu sync.Mutex
	n  int
}

// Lock takes key's lock, waiting for it.
func (k *Mutex) Lock(key string) (unlock func()) {
	k.mu.Lock()
	e := k.entry(key)
	e.n++
	k.mu.Unlock()
	e.mu.Lock()
	return k.unlocker(key, e)
}

// TryLock takes key's lock if it is free.
func (k *Mutex) TryLock(key string) (unlock func(), ok bool) {
	k.mu.Lock()
	e := k.entry(key)
	if !e.mu.TryLock() {
		if e.n == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
		return nil, false
	}
	e.n++
	k.mu.Unlock()
	return k.unlocker(key, e), true
}

// entry returns key's entry, creating it; callers hold k.mu.
func (k *Mutex) entry(key string) *entry {
	if k.m == nil {
		k.m = map[string]*entry{}
	}
	e := k.m[key]
	if e == nil {
		e = &entry{}
		k.m[key] = e
	}
	return e
}

func (k *Mutex) unlocker(key string, e *entry) func() {
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		e.n--
		if e.n == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}
