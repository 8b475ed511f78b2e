package mailq

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"zsched/core"
	"zsched/window"
)

// Age is ZMailer's saytime in its short form: what its mailq prints for
// QA= and Uptime:, and what scripts reading it expect.
func TestAgeIsZMailerSaytime(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"}, {-time.Second, "0s"}, {59 * time.Second, "59s"}, {173 * time.Second, "2m53s"},
		{time.Hour + 2*time.Minute, "1h2m"}, {time.Hour + 2*time.Minute + 5*time.Second, "1h2m5s"},
		{26 * time.Hour, "1d2h"}, {26*time.Hour + 3*time.Minute + 4*time.Second, "1d2h"},
		{24*time.Hour + 5*time.Minute + 7*time.Second, "1d5m7s"}, {3 * 24 * time.Hour, "3d"},
	} {
		if got := Age(tt.d); got != tt.want {
			t.Errorf("Age(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

// TestThreadPad: a thread's name is followed by tabs to ZMailer's fifth
// tab stop, or by a blank past it, as scripts reading its report count on.
func TestThreadPad(t *testing.T) {
	for name, want := range map[string]string{
		"    a/b/0":                           "\t\t\t",
		"    smtp/example.com/0":              "\t\t",
		"    smtp/mx.a-long-domain.example/1": " ",
	} {
		if got := ThreadPad(name); got != want {
			t.Errorf("ThreadPad(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestShapeHead: QSHAPE's head is Postfix qshape's, its columns aligned
// with the rows'.
func TestShapeHead(t *testing.T) {
	out := Shape([]core.ShapeRow{{Host: "example.com", Total: 3, Counts: make([]int, len(ShapeBuckets)+1)}})
	if len(out) != 2 || len(out[0]) != len(out[1]) || !strings.HasSuffix(out[0], " 1280+") {
		t.Fatalf("qshape table:\n%s", strings.Join(out, "\n"))
	}
}

// TestWaitingFooter: every waiting file is counted; past MaxWaiting the
// footer says how many more, WHY names each.
func TestWaitingFooter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if out := WaitingFooter(now, nil, 0); out != nil {
		t.Fatalf("no file waits, yet %q", out)
	}
	var ws []Waiting
	for i := range MaxWaiting {
		ws = append(ws, Waiting{Name: fmt.Sprintf("q/%d", i), Why: "locked", Since: now, Next: now.Add(32 * time.Second)})
	}
	out := WaitingFooter(now, ws, MaxWaiting+5)
	if len(out) != MaxWaiting+2 || out[0] != "Waiting to be read: 25" || out[1] != "    q/0\twaiting: locked; read again in 32s" ||
		out[len(out)-1] != "    … and 5 more (scheduler why NAME)" {
		t.Fatalf("footer:\n%s", strings.Join(out, "\n"))
	}
}

// TestThreadLineShowsSessionsByNode: with a cluster, a thread's line says
// the shared window and the live sessions node by node (issue 20), one
// blank-free field that scripts splitting on blanks keep whole; in
// fallback, with no breakdown, it says so instead.
func TestThreadLineShowsSessionsByNode(t *testing.T) {
	now := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	tv := core.ThreadView{Channel: "smtp", Host: "mx.example", Window: 5, MaxThr: 20,
		Cluster: &core.ClusterView{Window: 5, Leases: 5, Mine: 2, Nodes: 3,
			ByNode: []window.NodeLeases{{Node: "mx1", Leases: 2}, {Node: "mx2", Leases: 3}}}}
	line := ThreadLine(now, tv, Agents{}, false)
	if !strings.Contains(line, " cluster=5/5 mine=2 nodes=3 bynode=mx1:2,mx2:3 ") {
		t.Errorf("thread line %q: want the shared window and the sessions by node", line)
	}
	tv.Cluster = &core.ClusterView{Window: 2, Leases: 1, Mine: 1, Nodes: 3, Fallback: true}
	line = ThreadLine(now, tv, Agents{}, false)
	if strings.Contains(line, "bynode=") || !strings.Contains(line, " cluster:fallback") {
		t.Errorf("thread line in fallback %q: want no breakdown, and cluster:fallback", line)
	}
}

// TestThreadLineShowsBorrowedSessions: a destination whose sessions are
// jobs borrowed by agents attached elsewhere (feed = "message") says so:
// its line shows no P={} for them, and busy= borrowed= tell why its
// window is full. Without borrowed jobs the line is as it was.
func TestThreadLineShowsBorrowedSessions(t *testing.T) {
	now := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	tv := core.ThreadView{Channel: "smtp", Host: "b.test", Vertices: 1, Recipients: 1, Window: 2, MaxThr: 2,
		Busy: 2, Borrowed: 2, State: core.ThreadRunning}
	if got, want := ThreadLine(now, tv, Agents{}, false), "N=1 R=1 A=0 window=2/2 busy=2 borrowed=2 state=running"; got != want {
		t.Errorf("thread line %q, want %q", got, want)
	}
	tv.Borrowed, tv.Busy = 0, 0
	if got, want := ThreadLine(now, tv, Agents{}, false), "N=1 R=1 A=0 window=2/2 state=running"; got != want {
		t.Errorf("thread line without borrowed jobs %q, want %q", got, want)
	}
}
