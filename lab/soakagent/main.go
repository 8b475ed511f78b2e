// Command soakagent is the transport agent of the soak (lab soak): it
// delivers like testagents/sink, recording every delivery in -log before it
// marks the recipient, and, unless -safe, misbehaves now and then the ways
// real agents do:
//
//   - dies at start (a missing library, a usage error), before its first #hungry;
//   - forks a child that outlives it holding its standard output;
//   - crashes mid-job, after reporting some of the job's recipients;
//   - hangs on a job (locked recipients, no answer: jobtimeout must end it);
//   - is slow on a job (a remote server that takes seconds), within jobtimeout;
//   - spews lines that are not protocol, and now and then one of 100 KB.
//
// A recipient is recorded only when it is delivered and before its mark,
// so a recipient recorded twice was delivered twice.
//
//	soakagent -c channel -log FILE [-safe] [host]
//	soakagent -child    (the forked child: sleeps, holding what it inherited)
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"time"

	"zsched/ta"
	"zsched/testagents"
)

// Odds, per agent start and per job.
const (
	pDieAtStart = 0.02
	pFork       = 0.03
	pCrash      = 0.01
	pHang       = 0.005
	pSlow       = 0.02
	pGarbage    = 0.02
	pLongLine   = 0.002
)

// slowFor is how long a slow job takes, less than the soak's jobtimeout.
const slowFor = 3 * time.Second

// childLife is how long a forked child lives.
const childLife = 20 * time.Second

func main() {
	fs := flag.NewFlagSet("soakagent", flag.ContinueOnError)
	logPath := fs.String("log", "", "append one line per delivered recipient to this file")
	safe := fs.Bool("safe", false, "deliver only: no misbehaviour (the soak's final drain)")
	if len(os.Args) > 1 && os.Args[1] == "-child" {
		time.Sleep(childLife)
		return
	}
	a, err := ta.ParseFlags(fs, os.Args[1:], "")
	if err != nil {
		fail(err)
	}
	r := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(time.Now().UnixNano())))
	hostile := func(p float64) bool { return !*safe && r.Float64() < p }
	if hostile(pDieAtStart) {
		fmt.Fprintln(os.Stderr, "soakagent: error while loading shared libraries: libsoak.so.1: cannot open shared object file")
		os.Exit(127)
	}
	if hostile(pFork) {
		self, err := os.Executable()
		if err == nil {
			c := exec.Command(self, "-child")
			c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
			c.Start() // not waited for: it is meant to outlive this agent
		}
	}
	var s testagents.Sink
	if *logPath == "" {
		fail(fmt.Errorf("-log is required"))
	}
	f, err := os.OpenFile(*logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fail(err)
	}
	defer f.Close()
	s.Log = f
	err = a.Serve(func(d *ta.Delivery) []ta.Result {
		switch {
		case hostile(pHang):
			select {} // locked, silent: jobtimeout's
		case hostile(pSlow):
			time.Sleep(slowFor) // locked, delivering
		case hostile(pGarbage):
			// Not protocol: the scheduler logs or ignores these lines.
			fmt.Fprintf(os.Stdout, "soakagent says hello without a tab\n%d/1\t\tfrobnicate not a status word\n", d.File.Inum)
		case hostile(pLongLine):
			fmt.Fprintf(os.Stdout, "%s\n", strings.Repeat("x", 100<<10))
		}
		crash := hostile(pCrash)
		for k, i := range d.Rcpts {
			if crash && k == len(d.Rcpts)/2 {
				os.Exit(1) // the rest of the job still locked
			}
			if err := d.Report(s.DeliverOne(d, i)); err != nil {
				fail(err)
			}
		}
		return nil
	})
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "# soakagent: %v\n", err)
	os.Exit(1)
}
