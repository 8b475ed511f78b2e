package thread

import (
	"testing"
	"time"

	"zsched/config"
)

// BenchmarkWindow measures one feedback update, the cost paid on every
// judged delivery: mostly successes, one site failure in 50.
func BenchmarkWindow(b *testing.B) {
	c := config.Default().Defaults
	w := NewWindow(&c)
	epoch := time.Unix(0, 0)
	b.ResetTimer()
	for i := range b.N {
		if i%50 == 49 {
			w.Failed(epoch)
		} else {
			w.Succeeded(w.Limit(), epoch)
		}
	}
}
