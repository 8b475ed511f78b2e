// Command flaky defers a random fraction of the recipients (deferred, as a
// 4xx to one RCPT) and delivers the rest like sink. The choice is drawn
// from a generator seeded by -seed, so a run can be repeated.
//
//	flaky -c channel [-p 0.3] [-seed N] [host]
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"

	"zsched/report"
	"zsched/ta"
	"zsched/testagents"
)

func main() {
	fs := flag.NewFlagSet("flaky", flag.ContinueOnError)
	p := fs.Float64("p", 0.3, "probability that a recipient is deferred")
	seed := fs.Uint64("seed", 1, "random seed")
	a, err := ta.ParseFlags(fs, os.Args[1:], "")
	if err != nil {
		fail(err)
	}
	rng := rand.New(rand.NewPCG(*seed, 0))
	var s testagents.Sink
	err = a.Serve(func(d *ta.Delivery) []ta.Result {
		res := make([]ta.Result, 0, len(d.Rcpts))
		for _, i := range d.Rcpts {
			if rng.Float64() < *p {
				res = append(res, ta.Result{Rcpt: i, Status: report.Deferred,
					Text: "451 4.3.0 flaky: try again later"})
				continue
			}
			res = append(res, s.DeliverOne(d, i))
		}
		return res
	})
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "# flaky: %v\n", err)
	os.Exit(1)
}
