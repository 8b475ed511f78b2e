package daemon

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestReloadReadsBesideTheLoop: a reload whose file cannot be read yet
// (here a FIFO in its place, as a hung NFS mount would be) leaves the
// loop serving; a reload asked for while it reads runs after it, with
// the file as it is then; each applies what it read.
func TestReloadReadsBesideTheLoop(t *testing.T) {
	d := intakeDaemon(t, "", 10, 10, 0, 1, false)
	file := d.cfg.File
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(file, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		// A read still waiting on the FIFO ends with a writer.
		if f, err := os.OpenFile(file, os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	})

	// onLoop runs f on the loop; the loop not answering (blocked on the
	// file) fails the test rather than hang it.
	onLoop := func(what string, f func()) {
		t.Helper()
		if !d.inLoop(f, time.Minute) {
			t.Fatalf("%s: the loop did not answer", what)
		}
	}
	// waitReading waits, one loop turn at a time, for the state of the
	// reload under way.
	waitReading := func(what string, reading bool, next int) {
		t.Helper()
		for {
			var r bool
			var n int
			onLoop(what, func() { r, n = d.operator.reloads.reading, len(d.operator.reloads.next) })
			if r == reading && n == next {
				return
			}
		}
	}
	maxring := func() (n int) {
		onLoop("maxring", func() { n = d.cfg.Clauses[0].MaxRing })
		return n
	}
	write := func(maxring string) {
		t.Helper()
		f, err := os.OpenFile(file, os.O_WRONLY, 0) // waits for the reader
		if err != nil {
			t.Fatal(err)
		}
		f.Write(bytes.Replace(text, []byte("maxring = 4"), []byte("maxring = "+maxring), 1))
		f.Close()
	}

	d.Reload()
	waitReading("the first reload taken", true, 0)
	// The read waits on the FIFO; the loop serves on.
	d.Reload()
	waitReading("the second reload waits for the first", true, 1)
	if n := maxring(); n != 4 {
		t.Fatalf("maxring %d before any read ended, want 4", n)
	}
	write("6")
	// The first read is applied, and the second reads the file again.
	waitReading("the second reload reads", true, 0)
	if n := maxring(); n != 6 {
		t.Fatalf("maxring %d after the first read, want 6", n)
	}
	write("7")
	waitReading("both reloads done", false, 0)
	if n := maxring(); n != 7 {
		t.Fatalf("maxring %d after the second read, want 7", n)
	}
}
