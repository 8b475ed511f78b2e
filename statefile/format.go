package statefile

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"zsched/core"
)

// The file's first line names the format and its version, so a foreign
// file is never taken for ours. Version 2 added the learned ceiling (three
// fields at the end); version 3 made the file a journal (tombstones, later
// lines supersede); version 4 added whether the window is still in its
// slow start (a last field, 1 or 0), so that a restart resumes a slow start
// where it was instead of taking its window for one feedback governs.
// Versions 1 to 3 still load (their destinations as not in slow start, as
// they were read before); a Journal rewrites them as version 4 at its
// first save.
const (
	Header   = "# zsched destinations v4"
	HeaderV3 = "# zsched destinations v3"
	HeaderV2 = "# zsched destinations v2"
	HeaderV1 = "# zsched destinations v1"
	Columns  = "# channel host window success failure fail_cohorts dead_until updated ceiling strikes ceiling_at slow_start; \"-\" channel host: forgotten"
)

// Format renders ds as a whole state file: one destination per
// line, fields separated by blanks (channels and hosts have none).
func Format(ds []core.Destination) []byte {
	var b bytes.Buffer
	b.WriteString(Header + "\n")
	b.WriteString(Columns + "\n")
	for _, d := range ds {
		appendLine(&b, d)
	}
	return b.Bytes()
}

func appendLine(b *bytes.Buffer, d core.Destination) {
	dead := "-"
	if !d.DeadUntil.IsZero() {
		dead = d.DeadUntil.UTC().Format(time.RFC3339Nano)
	}
	at := "-"
	if !d.Window.CeilingAt.IsZero() {
		at = d.Window.CeilingAt.UTC().Format(time.RFC3339Nano)
	}
	starting := 0
	if d.Window.Starting {
		starting = 1
	}
	fmt.Fprintf(b, "%s %s %d %s %s %s %s %s %d %d %s %d\n", d.Channel, d.Host, d.Window.Concurrency,
		ftoa(d.Window.Success), ftoa(d.Window.Failure), ftoa(d.Window.FailCohorts),
		dead, d.Updated.UTC().Format(time.RFC3339Nano), d.Window.Ceiling, d.Window.Strikes, at, starting)
}

// ftoa formats f so that it parses back to the same float64.
func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// ErrForeign is returned for a file that does not start with our header.
var ErrForeign = errors.New("statefile: not a zsched destinations file")

// Parse reads a state file: the destinations it holds after
// its later lines have superseded earlier ones, sorted by channel and host.
// Any damage rejects the whole file (half a learned state is not worth the
// doubt), except a last line without its newline in a journal (version 3
// or 4): an append a crash cut short, whose earlier lines stand.
func Parse(data []byte) ([]core.Destination, error) {
	ds, _, err := replay(data)
	return ds, err
}

// replay is Parse, also returning how many
// destination and tombstone lines the file holds.
func replay(data []byte) ([]core.Destination, int, error) {
	header, _, _ := bytes.Cut(data, []byte("\n"))
	var fields int
	journal := false
	switch string(header) {
	case Header:
		fields, journal = 12, true
	case HeaderV3:
		fields, journal = 11, true
	case HeaderV2:
		fields = 11
	case HeaderV1:
		fields = 8
	default:
		return nil, 0, ErrForeign
	}
	if i := bytes.LastIndexByte(data, '\n'); journal && i >= 0 {
		data = data[:i+1] // a torn last line
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	sc.Scan()
	byKey := make(map[[2]string]core.Destination)
	records := 0
	for n := 2; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		records++
		if rest, ok := strings.CutPrefix(line, "- "); ok && journal {
			f := strings.Fields(rest)
			if len(f) != 2 {
				return nil, 0, fmt.Errorf("statefile line %d: tombstone of %d fields, want 2", n, len(f))
			}
			delete(byKey, [2]string{f[0], f[1]})
			continue
		}
		d, err := parseLine(line, fields)
		if err != nil {
			return nil, 0, fmt.Errorf("statefile line %d: %w", n, err)
		}
		byKey[[2]string{d.Channel, d.Host}] = d
	}
	if err := sc.Err(); err != nil {
		return nil, 0, fmt.Errorf("statefile: %w", err)
	}
	ds := make([]core.Destination, 0, len(byKey))
	for _, d := range byKey {
		ds = append(ds, d)
	}
	sortByKey(ds)
	return ds, records, nil
}

func sortByKey(ds []core.Destination) {
	slices.SortFunc(ds, func(a, b core.Destination) int {
		return cmp.Or(cmp.Compare(a.Channel, b.Channel), cmp.Compare(a.Host, b.Host))
	})
}

func parseLine(line string, fields int) (core.Destination, error) {
	f := strings.Fields(line)
	if len(f) != fields {
		return core.Destination{}, fmt.Errorf("%d fields, want %d", len(f), fields)
	}
	d := core.Destination{Channel: f[0], Host: f[1]}
	var err error
	if d.Window.Concurrency, err = strconv.Atoi(f[2]); err != nil || d.Window.Concurrency < 0 {
		return d, fmt.Errorf("window %q", f[2])
	}
	for i, p := range []*float64{&d.Window.Success, &d.Window.Failure, &d.Window.FailCohorts} {
		v, err := strconv.ParseFloat(f[3+i], 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return d, fmt.Errorf("feedback field %q", f[3+i])
		}
		*p = v
	}
	if f[6] != "-" {
		if d.DeadUntil, err = time.Parse(time.RFC3339Nano, f[6]); err != nil {
			return d, fmt.Errorf("dead_until %q", f[6])
		}
	}
	if d.Updated, err = time.Parse(time.RFC3339Nano, f[7]); err != nil {
		return d, fmt.Errorf("updated %q", f[7])
	}
	if fields == 8 {
		return d, nil
	}
	if d.Window.Ceiling, err = strconv.Atoi(f[8]); err != nil || d.Window.Ceiling < 0 {
		return d, fmt.Errorf("ceiling %q", f[8])
	}
	if d.Window.Strikes, err = strconv.Atoi(f[9]); err != nil || d.Window.Strikes < 0 {
		return d, fmt.Errorf("strikes %q", f[9])
	}
	if f[10] != "-" {
		if d.Window.CeilingAt, err = time.Parse(time.RFC3339Nano, f[10]); err != nil {
			return d, fmt.Errorf("ceiling_at %q", f[10])
		}
	}
	if fields == 11 {
		return d, nil
	}
	switch f[11] {
	case "1":
		d.Window.Starting = true
	case "0":
	default:
		return d, fmt.Errorf("slow_start %q", f[11])
	}
	return d, nil
}
