// Command deferall answers every job as ZMailer's smtp agent does when the
// connection is refused (zmailer-ta-observed.md O18): deferall for the
// first recipient, retryat +60 for the others. It delivers nothing.
//
//	deferall -c channel [host]
package main

import (
	"flag"
	"fmt"
	"os"

	"zsched/report"
	"zsched/ta"
)

func main() {
	fs := flag.NewFlagSet("deferall", flag.ContinueOnError)
	a, err := ta.ParseFlags(fs, os.Args[1:], "")
	if err != nil {
		fail(err)
	}
	err = a.Serve(func(d *ta.Delivery) []ta.Result {
		why := "smtp; 500 (connect to " + d.Host + ": Connection refused)"
		res := make([]ta.Result, 0, len(d.Rcpts))
		for k, i := range d.Rcpts {
			r := ta.Result{Rcpt: i, Status: report.RetryAt, Retry: "+60", Text: why}
			if k == 0 {
				r = ta.Result{Rcpt: i, Status: report.DeferAll, Text: why,
					Notary: report.Notary{Recipient: d.Rcpt(i).User, Action: "failed",
						Status: "4.4.1 (TCP/IP-connection failure)", Diagnostic: why}}
			}
			res = append(res, r)
		}
		return res
	})
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "# deferall: %v\n", err)
	os.Exit(1)
}
