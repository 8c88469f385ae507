package kafkatest

import (
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// FetchWatch is a kgo hook (kgo.WithHooks) that counts a client's Metadata requests and notes when
// it last wrote a Fetch and read a Fetch response: whether a long poll is held, and whether the
// client refreshed its metadata since.
type FetchWatch struct {
	mu                   sync.Mutex
	metadata             int
	fetchWrote, fetchGot time.Time
}

var (
	_ kgo.HookBrokerWrite = (*FetchWatch)(nil)
	_ kgo.HookBrokerRead  = (*FetchWatch)(nil)
)

// OnBrokerWrite implements kgo.HookBrokerWrite.
func (w *FetchWatch) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case kmsg.Key(key) == kmsg.Metadata:
		w.metadata++
	case kmsg.Key(key) == kmsg.Fetch && err == nil:
		w.fetchWrote = time.Now()
	}
}

// OnBrokerRead implements kgo.HookBrokerRead.
func (w *FetchWatch) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	if kmsg.Key(key) == kmsg.Fetch {
		w.mu.Lock()
		w.fetchGot = time.Now()
		w.mu.Unlock()
	}
}

// Held reports whether a Fetch written has had no response yet, and the Metadata requests so far.
func (w *FetchWatch) Held() (bool, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fetchWrote.After(w.fetchGot), w.metadata
}
