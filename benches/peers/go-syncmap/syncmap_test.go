// Package syncmap is the Go peer of benches/benches/maps.rs: sync.Map under the same
// workloads (10 000 prefilled uint64 keys; 90 % Load / 10 % Store, or 50/50; 1 and 2
// goroutines, with GOMAXPROCS set to match), so that its ns/op compares with
// criterion's time per operation there.
//
//	go test -bench . -benchtime 3s
package syncmap

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

const keys = 10_000

// xorshift64* as in benches/src/lib.rs (KeyStream).
type keyStream uint64

func newKeyStream(seed uint64) keyStream { return keyStream(seed*0x9E3779B97F4A7C15 | 1) }

func (s *keyStream) next() uint64 {
	x := uint64(*s)
	x ^= x >> 12
	x ^= x << 25
	x ^= x >> 27
	*s = keyStream(x)
	return x * 0x2545F4914F6CDD1D
}

func BenchmarkSyncMap(b *testing.B) {
	for _, mix := range []struct {
		name  string
		write uint64
	}{{"read90", 10}, {"write50", 50}} {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/%dt", mix.name, threads), func(b *testing.B) {
				var m sync.Map
				for k := uint64(0); k < keys; k++ {
					m.Store(k, k)
				}
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(threads))
				var seed atomic.Uint64
				var sink atomic.Uint64
				b.ResetTimer()
				// RunParallel starts GOMAXPROCS goroutines; ns/op is wall time per
				// operation over all of them, as criterion's throughput is here.
				b.RunParallel(func(pb *testing.PB) {
					s := newKeyStream(seed.Add(1))
					var found uint64
					for pb.Next() {
						r := s.next()
						k := r % keys
						if (r>>40)%100 < mix.write {
							m.Store(k, r)
						} else if _, ok := m.Load(k); ok {
							found++
						}
					}
					sink.Add(found)
				})
			})
		}
	}
}
