package daemon

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/config"
	"zsched/ctlfile"
)

var (
	routersMessages = flag.Int("routers.messages", 1000, "TestRouterWriters: messages each of the two router-style writers queues")
	routersLong     = flag.Bool("routers.long", false, "TestRouterWriters: write for 30 s (issue 16's form) instead of -routers.messages each")
)

// routerWriter writes messages as ZMailer's router lays them out
// (../shared/tools/zmailer-mkmsg.py): the body to a temporary file in
// queue/, renamed to queue/<its inode>; the control file to
// transport/.<inode>, renamed to transport/<inode> — a rename that replaces
// whatever has that name — and then a NEW datagram. The inode names the
// message, so a freed inode number comes straight back as a new message's
// name.
type routerWriter struct {
	po, notify string
	id         int
}

// write queues message n, whose only recipient is user, and returns its
// name.
func (w *routerWriter) write(n int, user, host string) (string, error) {
	tmp := filepath.Join(w.po, "queue", ".tmp"+strconv.Itoa(w.id))
	body := fmt.Sprintf("from <s@example.org>\nto <%s>\nenv-end\nSubject: router %d.%d\n\nbody\n", user, w.id, n)
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		return "", err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(tmp, &st); err != nil {
		return "", err
	}
	name := strconv.FormatUint(st.Ino, 10)
	if err := os.Rename(tmp, filepath.Join(w.po, "queue", name)); err != nil {
		return "", err
	}
	ctl := fmt.Sprintf("@ 0x00000007\ni %s\no %d\nl <%s.router@example.org>\ne s@example.org\ns smtp example.org s@example.org 0\nr           smtp %s %s 0\nm\nSubject: router\n\n",
		name, strings.Index(body, "\n\n")+2, name, host, user)
	dot := filepath.Join(w.po, "transport", "."+name)
	if err := os.WriteFile(dot, []byte(ctl), 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(dot, filepath.Join(w.po, "transport", name)); err != nil {
		return "", err
	}
	// No listener (the scheduler between two runs) is no error: its scan
	// finds the file.
	ctlfile.NotifyScheduler(w.notify, name)
	return name, nil
}

// TestRouterWriters runs two router-style writers beside a live scheduler
// that completes their messages as fast as a sink agent delivers them
// (issue 16, item 1): every freed inode is a name a writer may take at
// once. Then a second scheduler drains what is left. Every message must
// have been delivered, and no file may be left in the queue: a lost
// message is a recipient never delivered, its body orphaned in queue/.
// CI writes -routers.messages per writer; -routers.long writes for 30 s.
func TestRouterWriters(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs real agents")
	}
	agents := bins.AgentsFor(t)
	dir := t.TempDir()
	po := filepath.Join(dir, "po")
	deliveries := filepath.Join(dir, "deliveries.log")
	cfgText := fmt.Sprintf(`[scheduler]
postoffice = %q
scaninterval = "1s"
log_level = "warn"
shutdown_timeout = "5s"

[[clause]]
select = "smtp/*"
command = [%q, "-c", "smtp", "-log", %q]
maxring = 8
overfeed = 1
`, po, agents["sink"], deliveries)
	cfg, err := config.Parse(filepath.Join(dir, "scheduler.toml"), []byte(cfgText))
	if err != nil {
		t.Fatal(err)
	}
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})

	d, err := New(cfg, log, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()

	var mu sync.Mutex
	written := map[string]bool{} // recipient address → queued
	var wg sync.WaitGroup
	var writeErr error
	var until time.Time
	if *routersLong {
		until = time.Now().Add(30 * time.Second)
	}
	for id := range 2 {
		w := &routerWriter{po: po, notify: cfg.Scheduler.NotifySocket, id: id}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				if until.IsZero() && n == *routersMessages || !until.IsZero() && time.Now().After(until) {
					return
				}
				host := fmt.Sprintf("d%d.test", n%50)
				user := fmt.Sprintf("w%d.%d@%s", id, n, host)
				if _, err := w.write(n, user, host); err != nil {
					mu.Lock()
					writeErr = err
					mu.Unlock()
					return
				}
				mu.Lock()
				written[user] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if writeErr != nil {
		t.Fatal(writeErr)
	}
	// Let the live scheduler catch up (each writer's messages are one
	// delivery each), then stop it; a second run drains what is left.
	deadline := time.Now().Add(3 * time.Minute)
	for countDeliveries(t, deliveries) < len(written) && countControlFiles(po) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no drain after 3 minutes: %d of %d delivered", countDeliveries(t, deliveries), len(written))
		}
		time.Sleep(20 * time.Millisecond) // polling files another process writes
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	d2, err := New(cfg, log, Options{Drain: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel2()
	if err := d2.Run(ctx2); err != nil {
		t.Fatal(err)
	}
	if ctx2.Err() != nil {
		t.Fatal("the second run did not drain in 3 minutes")
	}

	seen := readDeliveredUsers(t, deliveries)
	lost := 0
	for u := range written {
		if seen[u] == 0 {
			lost++
		}
	}
	orphans := countFiles(filepath.Join(po, "queue"))
	t.Logf("router-style writers: %d messages written, %d delivered, %d lost, %d files left in queue/, %d in transport/",
		len(written), len(seen), lost, orphans, countControlFiles(po))
	if lost > 0 {
		t.Errorf("%d of %d messages lost", lost, len(written))
	}
	if orphans > 0 {
		t.Errorf("%d files left in queue/ (orphaned bodies)", orphans)
	}
}

// countDeliveries counts the lines of the sink's delivery log.
func countDeliveries(t *testing.T, path string) int {
	return len(readDeliveredUsers(t, path))
}

// readDeliveredUsers returns how often each address was delivered; the
// sink logs "inum/offset address" per recipient.
func readDeliveredUsers(t *testing.T, path string) map[string]int {
	t.Helper()
	seen := map[string]int{}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return seen
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if _, user, ok := strings.Cut(sc.Text(), " "); ok {
			seen[user]++
		}
	}
	return seen
}

// countControlFiles counts the digit-named files in transport/.
func countControlFiles(po string) int {
	ents, _ := os.ReadDir(filepath.Join(po, "transport"))
	n := 0
	for _, e := range ents {
		if name := e.Name(); name[0] >= '0' && name[0] <= '9' {
			n++
		}
	}
	return n
}

// countFiles counts the files in a directory tree.
func countFiles(dir string) int {
	n := 0
	filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			n++
		}
		return nil
	})
	return n
}
