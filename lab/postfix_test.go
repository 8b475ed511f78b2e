package lab

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"zsched/internal/need"
	"zsched/postfix"
)

// A short run of the experiment against a real Postfix: its limiter
// answers 421, every refusal is a first-pass deferral of the whole job,
// and the window settles just above the server's limit. The full-size run
// is "go run ./cmd/lab postfix".
func TestPostfixLimiterShort(t *testing.T) {
	need.Met(t, "the postfix package, as root", postfix.Available())
	need.Met(t, "smtp-sink (the postfix package)", postfix.SinkAvailable())
	bin := bins.ProgramFor(t, "zsched/cmd/smtp-ta")
	l := README("1/concurrency")
	l.Messages, l.Service, l.Jitter = 100, 50*time.Millisecond, 0
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := Postfix(ctx, l, bin, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WritePostfixTable(&b, []PostfixResult{r}); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", b.String())
	if r.Recipients != l.Messages*l.Rcpts || r.Deliveries != l.Messages {
		t.Fatalf("first pass: %d recipients, %d deliveries; want %d and %d", r.Recipients, r.Deliveries, l.Messages*l.Rcpts, l.Messages)
	}
	if r.Refused == 0 {
		t.Fatal("Postfix refused no session: its limiter never acted")
	}
	// Each 421 refusal deferred one whole job (deferall for its recipients);
	// everything else Postfix accepted.
	if r.Deferred != r.Refused*l.Rcpts || r.Sent != r.Recipients-r.Deferred {
		t.Errorf("deferred %d, refused %d sessions, Postfix delivered %d of %d", r.Deferred, r.Refused, r.Sent, r.Recipients)
	}
	// 1/N feedback: about one delivery in six refused once the window
	// sits at the limit (the short run is noisy; the command's is not).
	if pct := 100 * r.DeferredRate(); pct < 5 || pct > 35 {
		t.Errorf("first-pass deferred %.1f%%, want near 1/6", pct)
	}
	if c := r.Concurrency.Mean; c < 4.5 || c > 7 {
		t.Errorf("average window %.2f, want just above the server's 5", c)
	}
	if !strings.Contains(b.String(), "421 refusals") {
		t.Error("table lacks the maillog columns")
	}
}
