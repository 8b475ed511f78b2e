package replay

import (
	"fmt"
	"math"
	"math/rand"
	"sort"
	"time"

	"zsched/model"
)

// Day describes a synthetic day of traffic and the destinations' true
// behaviour: the simulator's scale test, and the ground truth its
// inference is checked against. Recipients arrive over Span following a
// daily curve (a quiet night, a busy afternoon), in messages of one to
// four recipients; destinations get them by Zipf's law (a few big
// providers, a long tail).
type Day struct {
	Recipients int
	Dests      int
	Span       time.Duration // default 24h
	Start      time.Time     // default 2026-01-05 00:00 UTC
	Seed       int64
}

func (d *Day) defaults() {
	if d.Span <= 0 {
		d.Span = 24 * time.Hour
	}
	if d.Start.IsZero() {
		d.Start = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	}
	if d.Dests <= 0 {
		d.Dests = 1
	}
}

// DayHost names the i-th destination of a Day.
func DayHost(i int) string { return fmt.Sprintf("d%05d.example", i) }

// Workload returns the day's messages.
func (d Day) Workload() *Workload {
	d.defaults()
	rng := rand.New(rand.NewSource(d.Seed))
	w := &Workload{Dests: make([]Dest, d.Dests)}
	for i := range w.Dests {
		w.Dests[i] = Dest{Channel: "smtp", Host: DayHost(i)}
	}
	zipf := rand.NewZipf(rng, 1.1, 1, uint64(d.Dests-1))
	for n := 0; n < d.Recipients; {
		k := min(1+rng.Intn(4), d.Recipients-n)
		m := Msg{Arrival: d.Start.Add(d.arrival(rng.Float64())), Rcpts: make([]int32, k)}
		for i := range m.Rcpts {
			m.Rcpts[i] = int32(zipf.Uint64())
			w.Dests[m.Rcpts[i]].Recipients++
		}
		w.Msgs = append(w.Msgs, m)
		n += k
	}
	sort.SliceStable(w.Msgs, func(i, j int) bool { return w.Msgs[i].Arrival.Before(w.Msgs[j].Arrival) })
	w.Recipients = d.Recipients
	if len(w.Msgs) > 0 {
		w.Start, w.End = w.Msgs[0].Arrival, w.Msgs[len(w.Msgs)-1].Arrival
	}
	return w
}

// arrival maps u in [0,1) to a time of the day whose density follows the
// daily curve 0.3 + 0.7·sin²(π·t/Span): the inverse of its distribution
// function, found by bisection.
func (d Day) arrival(u float64) time.Duration {
	cdf := func(x float64) float64 { // x in [0,1]
		return (0.3*x + 0.7*(x/2-math.Sin(2*math.Pi*x)/(4*math.Pi))) / 0.65
	}
	lo, hi := 0.0, 1.0
	for i := 0; i < 40; i++ {
		mid := (lo + hi) / 2
		if cdf(mid) < u {
			lo = mid
		} else {
			hi = mid
		}
	}
	return time.Duration(lo * float64(d.Span))
}

// Truth returns the day's destinations as they really behave: most deliver
// in 20 to 400 ms per recipient (log-normal) after 50 to 200 ms of
// session set-up; one in twenty takes 2 to 8 sessions and refuses above;
// one in twenty refuses 5 % of sessions regardless; one in fifty is dead;
// 1 % of recipients fail, 0.5 % are deferred on their own. Agents start in
// 5 ms.
func (d Day) Truth() *model.Model {
	d.defaults()
	rng := rand.New(rand.NewSource(d.Seed + 7))
	dests := make([]*model.Dest, d.Dests)
	for i := range dests {
		med := time.Duration(20+rng.Intn(380)) * time.Millisecond
		dd := &model.Dest{
			Channel: "smtp", Host: DayHost(i),
			PerSession: model.Fixed(time.Duration(50+rng.Intn(150)) * time.Millisecond),
			PerRcpt:    logNormal(med, 0.5),
			RefuseTime: model.Fixed(30 * time.Millisecond),
			Failed:     0.01, Deferred: 0.005,
		}
		switch u := rng.Float64(); {
		case u < 0.02:
			dd.P, dd.Retry = 1, time.Minute
		case u < 0.07:
			dd.Limit = 2 + rng.Intn(7)
		case u < 0.12:
			dd.P = 0.05
		}
		dests[i] = dd
	}
	return model.New(dests, &model.Dest{PerRcpt: model.Fixed(100 * time.Millisecond)}, 5*time.Millisecond)
}

// logNormal is the distribution of median·e^(σ·N(0,1)).
func logNormal(median time.Duration, sigma float64) model.Dist {
	var x model.Dist
	for i := range x.Q {
		q := float64(i) / float64(model.Quantiles-1)
		q = min(max(q, 0.001), 0.999)
		x.Q[i] = time.Duration(float64(median) * math.Exp(sigma*normQuantile(q)))
	}
	x.N = model.Quantiles
	return x
}

// normQuantile is the standard normal quantile (Acklam's approximation,
// good to 1e-9: ample for a synthetic distribution).
func normQuantile(p float64) float64 {
	a := [...]float64{-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00}
	b := [...]float64{-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01, -1.328068155288572e+01}
	c := [...]float64{-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00}
	dd := [...]float64{7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00}
	const low = 0.02425
	switch {
	case p < low:
		q := math.Sqrt(-2 * math.Log(p))
		return (((((c[0]*q+c[1])*q+c[2])*q+c[3])*q+c[4])*q + c[5]) / ((((dd[0]*q+dd[1])*q+dd[2])*q+dd[3])*q + 1)
	case p > 1-low:
		q := math.Sqrt(-2 * math.Log(1-p))
		return -(((((c[0]*q+c[1])*q+c[2])*q+c[3])*q+c[4])*q + c[5]) / ((((dd[0]*q+dd[1])*q+dd[2])*q+dd[3])*q + 1)
	}
	q := p - 0.5
	r := q * q
	return (((((a[0]*r+a[1])*r+a[2])*r+a[3])*r+a[4])*r + a[5]) * q / (((((b[0]*r+b[1])*r+b[2])*r+b[3])*r+b[4])*r + 1)
}
