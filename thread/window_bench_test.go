package thread

import (
	"testing"

	"zsched/config"
)

// BenchmarkWindow measures one feedback update, the cost paid on every
// judged delivery: mostly successes, one site failure in 50.
func BenchmarkWindow(b *testing.B) {
	c := config.Default().Defaults
	w := NewWindow(&c)
	b.ResetTimer()
	for i := range b.N {
		if i%50 == 49 {
			w.Failed()
		} else {
			w.Succeeded(w.Limit())
		}
	}
}
