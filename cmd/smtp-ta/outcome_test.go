package main

import (
	"errors"
	"io"
	"testing"

	"zsched/report"
	"zsched/smtpclient"
)

func rep(code int, enh string) smtpclient.Reply {
	return smtpclient.Reply{Code: code, Enhanced: enh, Lines: []string{"text"}}
}

// The mapping of replies to status words, recipient by recipient, for the
// shapes a transaction can take.
func TestOutcomes(t *testing.T) {
	ok := rep(250, "2.0.0")
	rcpts := []rcpt{{idx: 0, addr: "a@x"}, {idx: 1, addr: "b@x"}, {idx: 2, addr: "c@x", notifySuccess: true}}
	site := func(r smtpclient.Reply) error {
		return &smtpclient.Error{Stage: smtpclient.StageRcpt, Reply: r}
	}
	cases := []struct {
		name  string
		tx    smtpclient.Tx
		err   error
		dsn   bool
		want  []report.Status
		again int
	}{
		{"all accepted, server with DSN", smtpclient.Tx{Mail: ok, Rcpts: []smtpclient.Reply{ok, ok, ok}, Data: rep(354, ""), Final: ok}, nil, true,
			[]report.Status{report.OK, report.OK, report.OK3}, 0},
		{"all accepted, server without DSN", smtpclient.Tx{Mail: ok, Rcpts: []smtpclient.Reply{ok, ok, ok}, Data: rep(354, ""), Final: ok}, nil, false,
			[]report.Status{report.OK, report.OK, report.OK2}, 0},
		{"mixed RCPT replies", smtpclient.Tx{Mail: ok, Rcpts: []smtpclient.Reply{rep(550, "5.1.1"), rep(451, "4.2.1"), ok}, Data: rep(354, ""), Final: ok}, nil, true,
			[]report.Status{report.Error2, report.Deferred, report.OK3}, 0},
		{"MAIL refused for now", smtpclient.Tx{Mail: rep(451, ""), Rcpts: []smtpclient.Reply{rep(503, ""), rep(503, ""), rep(503, "")}}, nil, true,
			[]report.Status{report.Deferred, report.Deferred, report.Deferred}, 0},
		{"MAIL refused", smtpclient.Tx{Mail: rep(553, "5.1.8")}, nil, true,
			[]report.Status{report.Error2, report.Error2, report.Error2}, 0},
		{"DATA refused", smtpclient.Tx{Mail: ok, Rcpts: []smtpclient.Reply{ok, rep(550, ""), ok}, Data: rep(554, "")}, nil, true,
			[]report.Status{report.Error2, report.Error2, report.Error2}, 0},
		{"4xx after the dot", smtpclient.Tx{Mail: ok, Rcpts: []smtpclient.Reply{ok, rep(550, ""), ok}, Data: rep(354, ""), Final: rep(451, "4.3.0")}, nil, true,
			[]report.Status{report.Deferback, report.Error2, report.Deferback}, 0},
		{"5xx after the dot", smtpclient.Tx{Mail: ok, Rcpts: []smtpclient.Reply{ok, ok, ok}, Data: rep(354, ""), Final: rep(554, "5.7.1")}, nil, true,
			[]report.Status{report.Error2, report.Error2, report.Error2}, 0},
		// A 421 settles only what no earlier reply settled.
		{"421 at the second RCPT", smtpclient.Tx{Mail: ok, Rcpts: []smtpclient.Reply{rep(550, ""), rep(421, "4.7.0"), {}}},
			site(rep(421, "4.7.0")), true, []report.Status{report.Error2, report.DeferAll, report.DeferAll}, 0},
		{"421 after the dot", smtpclient.Tx{Mail: ok, Rcpts: []smtpclient.Reply{ok, rep(450, ""), ok}, Data: rep(354, ""), Final: rep(421, "")},
			site(rep(421, "")), true, []report.Status{report.DeferAll, report.Deferred, report.DeferAll}, 0},
		{"connection lost during DATA", smtpclient.Tx{Mail: ok, Rcpts: []smtpclient.Reply{ok, ok, ok}, Data: rep(354, "")},
			&smtpclient.Error{Stage: smtpclient.StageDot, Err: io.ErrUnexpectedEOF}, true,
			[]report.Status{report.DeferAll, report.DeferAll, report.DeferAll}, 0},
		{"RSET failed before anything", smtpclient.Tx{}, &smtpclient.Error{Stage: smtpclient.StageReset, Err: errors.New("broken pipe")}, true,
			[]report.Status{report.DeferAll, report.DeferAll, report.DeferAll}, 0},
		// 452 too many recipients: the refused ones go in the next transaction.
		{"452 too many recipients", smtpclient.Tx{Mail: ok, Rcpts: []smtpclient.Reply{ok, rep(452, "4.5.3"), rep(452, "4.5.3")}, Data: rep(354, ""), Final: ok}, nil, true,
			[]report.Status{report.OK}, 2},
		// ...unless none was accepted: then it is an ordinary deferral.
		{"452 with none accepted", smtpclient.Tx{Mail: ok, Rcpts: []smtpclient.Reply{rep(452, "4.5.3"), rep(452, "4.5.3"), rep(452, "4.5.3")}}, nil, true,
			[]report.Status{report.Deferred, report.Deferred, report.Deferred}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tx := tc.tx
			tx.MailCmd = "MAIL FROM:<s@x>"
			for _, r := range rcpts {
				tx.RcptCmds = append(tx.RcptCmds, "RCPT TO:<"+r.addr+">")
			}
			for len(tx.Rcpts) < len(rcpts) {
				tx.Rcpts = append(tx.Rcpts, smtpclient.Reply{})
			}
			res, again := outcomes(&tx, tc.err, rcpts, peer{dsn: tc.dsn, remoteMTA: "dns; mx.x (192.0.2.1|25)"})
			if len(again) != tc.again {
				t.Fatalf("%d recipients for another transaction, want %d", len(again), tc.again)
			}
			if len(res) != len(tc.want) {
				t.Fatalf("%d results, want %d", len(res), len(tc.want))
			}
			for i, r := range res {
				if r.Status != tc.want[i] {
					t.Errorf("recipient %d: %s, want %s (text %q)", r.Rcpt, r.Status, tc.want[i], r.Text)
				}
				n := r.Notary
				if n.Recipient != rcpts[r.Rcpt].addr || n.RemoteMTA == "" || n.Status == "" || n.Diagnostic == "" {
					t.Errorf("recipient %d: notary %+v not filled", r.Rcpt, n)
				}
				wantAction := map[report.Class]string{report.Delivered: "delivered", report.Permanent: "failed",
					report.Transient: "delayed", report.SiteFailed: "delayed"}[r.Status.Class()]
				if r.Status == report.OK2 {
					wantAction = "relayed"
				}
				if n.Action != wantAction {
					t.Errorf("recipient %d: action %q, want %q", r.Rcpt, n.Action, wantAction)
				}
			}
		})
	}
}
