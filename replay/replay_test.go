package replay

import (
	"bytes"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"zsched/config"
	"zsched/model"
	"zsched/trace"
)

func parseConfig(t testing.TB, extra string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("sim.toml", []byte("[scheduler]\npostoffice = \"/nonexistent\"\n\n[defaults]\nexpiry = \"10m\"\nexpiry2 = \"1m\"\n"+extra+
		"\n[[clause]]\nselect = \"smtp/*\"\ncommand = \"smtp\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// labWorkload is a small version of the lab's validation traffic: bursts
// at a limited destination, a dead one, a slow one and fast ones.
func labWorkload() *Workload {
	w := &Workload{Dests: []Dest{{Channel: "smtp", Host: "limited.test"}, {Channel: "smtp", Host: "dead.test"},
		{Channel: "smtp", Host: "slow.test"}}}
	for i := 0; i < 20; i++ {
		w.Dests = append(w.Dests, Dest{Channel: "smtp", Host: "fast" + string(rune('a'+i)) + ".test"})
	}
	add := func(at time.Duration, rcpts ...int32) {
		w.Msgs = append(w.Msgs, Msg{Arrival: t0.Add(at), Rcpts: rcpts})
		for _, d := range rcpts {
			w.Dests[d].Recipients++
			w.Recipients++
		}
	}
	for i := 0; i < 300; i++ { // background, one message every 200 ms
		at := time.Duration(i) * 200 * time.Millisecond
		switch i % 10 {
		case 0:
			add(at, 1)
		case 1, 2:
			add(at, 2, int32(3+i%20))
		default:
			add(at, int32(3+i%20), 0)
		}
	}
	for b := 0; b < 2; b++ { // bursts at the limited destination
		for i := 0; i < 300; i++ {
			add(time.Duration(5+25*b)*time.Second+time.Duration(i)*10*time.Millisecond, 0, 0)
		}
	}
	sortMsgs(w)
	return w
}

func sortMsgs(w *Workload) {
	ms := w.Msgs
	for i := 1; i < len(ms); i++ {
		for j := i; j > 0 && ms[j].Arrival.Before(ms[j-1].Arrival); j-- {
			ms[j], ms[j-1] = ms[j-1], ms[j]
		}
	}
	w.Start, w.End = ms[0].Arrival, ms[len(ms)-1].Arrival
}

// labTruth is how labWorkload's destinations behave.
func labTruth() *model.Model {
	ms := time.Millisecond
	return model.New([]*model.Dest{
		{Channel: "smtp", Host: "limited.test", Limit: 4, PerRcpt: model.Fixed(50 * ms), RefuseTime: model.Fixed(2 * ms)},
		{Channel: "smtp", Host: "dead.test", P: 1, Retry: time.Minute, RefuseTime: model.Fixed(5 * ms)},
		{Channel: "smtp", Host: "slow.test", PerRcpt: model.Fixed(300 * ms)},
	}, &model.Dest{PerRcpt: model.Fixed(5 * ms)}, 20*ms)
}

// TestReplayRoundTrip: a run of known destinations writes the outcome log
// the daemon would; the log is read back, the destinations are inferred
// from it, and simulating it again predicts what the log says happened.
// The core's invariants are checked after every event.
func TestReplayRoundTrip(t *testing.T) {
	cfg := parseConfig(t, "")
	w := labWorkload()
	var log bytes.Buffer
	truth, err := Run(cfg, w, labTruth(), Options{Name: "truth", Seed: 3, Check: 1, Trace: &log})
	if err != nil {
		t.Fatal(err)
	}
	if truth.Checks != truth.Events || truth.Delivered == 0 || truth.Refusals == 0 || truth.Pending != 0 ||
		truth.Expired != w.Dests[1].Recipients {
		t.Fatalf("the truth's run: %+v", truth)
	}
	ld, err := Load(trace.NewReader(&log, trace.Zsched, trace.Options{}), model.Options{}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if ld.Stats.Malformed != 0 || ld.Workload.Recipients != w.Recipients || len(ld.Workload.Msgs) != len(w.Msgs) {
		t.Fatalf("read back: %+v, %d recipients in %d messages", ld.Stats, ld.Workload.Recipients, len(ld.Workload.Msgs))
	}
	obs := ld.Observed
	if obs.Delivered != truth.Delivered || obs.Expired != truth.Expired || obs.FirstDeferred != truth.FirstDeferred ||
		obs.Refusals != truth.Refusals || obs.DelayP50 != truth.DelayP50.Truncate(time.Millisecond) {
		t.Errorf("what the log says\n %+v\nwhat happened\n %+v", obs, truth)
	}
	lim, dead, slow := ld.Model.Lookup("smtp", "limited.test"), ld.Model.Lookup("smtp", "dead.test"), ld.Model.Lookup("smtp", "slow.test")
	if lim.Limit != 4 || lim.P != 0 {
		t.Errorf("limited.test: limit %d p %.3f, want 4 and 0", lim.Limit, lim.P)
	}
	if got := lim.PerRcpt.Quantile(0.5) + lim.PerSession.Quantile(0.5); got < 45*time.Millisecond || got > 60*time.Millisecond {
		t.Errorf("limited.test: a one-recipient session takes %v, want 50ms", got)
	}
	if dead.P != 1 || dead.Limit != 0 || dead.Retry != 0 || dead.RefuseTime.Quantile(0.9) > 10*time.Millisecond {
		t.Errorf("dead.test: %+v", dead)
	}
	if got := slow.PerRcpt.Quantile(0.5); got < 280*time.Millisecond || got > 330*time.Millisecond {
		t.Errorf("slow.test: %v per recipient, want 300ms", got)
	}
	if ld.Model.Startup < 15*time.Millisecond || ld.Model.Startup > 30*time.Millisecond {
		t.Errorf("agent start-up %v, want 20ms", ld.Model.Startup)
	}
	pred, err := Run(cfg, ld.Workload, ld.Model, Options{Name: "predicted", Seed: 4, Check: 1, Until: ld.Workload.End})
	if err != nil {
		t.Fatal(err)
	}
	if d := pred.FirstDeferredPct() - obs.FirstDeferredPct(); math.Abs(d) > 2 {
		t.Errorf("first-pass deferred: predicted %.1f %%, the log %.1f %%", pred.FirstDeferredPct(), obs.FirstDeferredPct())
	}
	for _, q := range []struct {
		name       string
		pred, real time.Duration
	}{{"p50", pred.DelayP50, obs.DelayP50}, {"p95", pred.DelayP95, obs.DelayP95}} {
		if r := math.Abs(float64(q.pred-q.real)) / float64(q.real); r > 0.25 {
			t.Errorf("delay %s: predicted %v, the log %v", q.name, q.pred, q.real)
		}
	}
	if pred.Top[0].Name != "smtp/limited.test" || pred.Top[0].PeakSessions > 4 || pred.Top[0].PeakWindow < 5 {
		t.Errorf("limited.test in the prediction: %+v", pred.Top[0])
	}
}

// TestReplayChangesWithTheConfiguration: the same traffic under a
// configuration without the learned ceiling defers more at the limiter.
func TestReplayChangesWithTheConfiguration(t *testing.T) {
	w, m := labWorkload(), labTruth()
	with, err := Run(parseConfig(t, ""), w, m, Options{Seed: 1, Check: 1})
	if err != nil {
		t.Fatal(err)
	}
	without, err := Run(parseConfig(t, "learned_ceiling = false"), w, m, Options{Seed: 1, Check: 1})
	if err != nil {
		t.Fatal(err)
	}
	if without.Refusals <= with.Refusals || without.FirstDeferredPct() <= with.FirstDeferredPct() {
		t.Errorf("with the ceiling %d refusals, %.1f %% deferred; without %d, %.1f %%",
			with.Refusals, with.FirstDeferredPct(), without.Refusals, without.FirstDeferredPct())
	}
}

func TestReplayIsDeterministic(t *testing.T) {
	cfg := parseConfig(t, "")
	var logs [2]bytes.Buffer
	var rs [2]Result
	for i := range rs {
		var err error
		if rs[i], err = Run(cfg, labWorkload(), labTruth(), Options{Seed: 9, Trace: &logs[i], TraceJSON: true}); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(rs[0], rs[1]) || !bytes.Equal(logs[0].Bytes(), logs[1].Bytes()) {
		t.Errorf("two runs of one seed differ:\n%+v\n%+v", rs[0], rs[1])
	}
	recs := 0
	r := trace.NewReader(&logs[0], trace.Auto, trace.Options{})
	for {
		if _, err := r.Next(); err != nil {
			break
		}
		recs++
	}
	if st := r.Stats(); recs == 0 || st.Malformed != 0 || r.Format() != trace.Zsched {
		t.Errorf("the JSON trace: %d records, %+v", recs, st)
	}
}

// TestReplayAdmission: with room for 5 recipients in core, arrivals wait
// on "disk" as the daemon's do, and nothing is lost.
func TestReplayAdmission(t *testing.T) {
	w, m := labWorkload(), labTruth()
	open, err := Run(parseConfig(t, ""), w, m, Options{Seed: 1, Check: 1})
	if err != nil {
		t.Fatal(err)
	}
	cfg := parseConfig(t, "")
	cfg.Scheduler.RecipientActiveLimit = 5
	tight, err := Run(cfg, w, m, Options{Seed: 1, Check: 1})
	if err != nil {
		t.Fatal(err)
	}
	if tight.Recipients != open.Recipients || tight.Delivered+tight.Expired != tight.Recipients || tight.DelayP95 <= open.DelayP95 {
		t.Errorf("limited admission %+v\nopen %+v", tight, open)
	}
}

func TestWriteTable(t *testing.T) {
	var b strings.Builder
	rs := []Result{{Name: "trace", Recipients: 10, FirstAttempts: 10, FirstDeferred: 1, DelayP50: 1500 * time.Millisecond,
		Top: []DestResult{{Name: "smtp/a", PeakWindow: -1, PeakSessions: 3}}},
		{Name: "A.toml", Recipients: 10, FirstAttempts: 8, FirstDeferred: 2, Top: []DestResult{{Name: "smtp/a", PeakWindow: 7, AvgWindow: 5.5, PeakSessions: 5}}}}
	if err := WriteTable(&b, rs); err != nil {
		t.Fatal(err)
	}
	// Columns line up; compare rows with their spacing folded.
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	for _, want := range []string{"trace A.toml", "first-pass deferred % 10.0 25.0", "delay p50 1.50s 0",
		"smtp/a window peak/avg - 7 / 5.50", "smtp/a sessions peak 3 5"} {
		if !slices.Contains(lines, want) {
			t.Errorf("no row %q in\n%s", want, b.String())
		}
	}
}

// TestReplayEnds: mail no clause routes waits for a reload, as in the
// daemon, and does not keep the clock going; mail that never expires at
// a dead destination stops the run with an error a year on.
func TestReplayEnds(t *testing.T) {
	w, m := labWorkload(), labTruth()
	cfg, err := config.Parse("only.toml", []byte("[scheduler]\npostoffice = \"/x\"\n[defaults]\nexpiry = \"10m\"\n[[clause]]\nselect = \"smtp/limited.test\"\ncommand = \"x\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(cfg, w, m, Options{Seed: 1, Check: 100})
	if err != nil {
		t.Fatal(err)
	}
	if want := w.Recipients - w.Dests[0].Recipients; r.Unrouted != want || r.Pending != want || r.Delivered != w.Dests[0].Recipients {
		t.Errorf("unrouted %d, pending %d, delivered %d; want %d, %d, %d", r.Unrouted, r.Pending, r.Delivered, want, want, w.Dests[0].Recipients)
	}
	never, err := config.Parse("never.toml", []byte("[scheduler]\npostoffice = \"/x\"\n[defaults]\nexpiry = 0\nexpiry2 = 0\ninterval = \"6h\"\n[[clause]]\nselect = \"smtp/*\"\ncommand = \"x\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	one := &Workload{Dests: w.Dests, Msgs: []Msg{{Arrival: t0, Rcpts: []int32{1}}}, Recipients: 1, Start: t0, End: t0}
	_, err = Run(never, one, m, Options{Seed: 1})
	if err == nil || !strings.Contains(err.Error(), "still queued") {
		t.Errorf("mail that never expires: %v", err)
	}
}
