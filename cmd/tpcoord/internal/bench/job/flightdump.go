package job

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// readDump waits for the flight dump file whose name starts with
// "flight-"+label and returns its steps that started at or after since and
// had rows.
func readDump(ctx context.Context, dir, label string, since time.Time) ([]api.StepTiming, error) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		matches, _ := filepath.Glob(filepath.Join(dir, "flight-"+label+"-*.txt"))
		if len(matches) > 0 {
			// The dump is written with one WriteFile; a file just created
			// may not hold every line yet: parseDump says so.
			data, err := os.ReadFile(matches[len(matches)-1])
			if err == nil {
				steps, complete, err := parseDump(data, since)
				if err != nil {
					return nil, err
				}
				if complete {
					return steps, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no flight dump of %s in %s: %w", label, dir, ctx.Err())
		case <-t.C:
		}
	}
}

// parseDump parses rank.FlightRecorder.Dump's text: a header line ("…;
// last K of M steps (ms):"), a column line, then K step lines. It returns
// the steps that started at or after since and had rows; complete is false
// while fewer than K step lines are there.
func parseDump(data []byte, since time.Time) (steps []api.StepTiming, complete bool, err error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	if !sc.Scan() {
		return nil, false, nil
	}
	var kept, total int
	_, hdr, ok := strings.Cut(sc.Text(), "; last ")
	if !ok {
		return nil, false, fmt.Errorf("flight dump: unexpected header %q", sc.Text())
	}
	if _, err := fmt.Sscanf(hdr, "%d of %d steps", &kept, &total); err != nil {
		return nil, false, fmt.Errorf("flight dump: header %q: %w", sc.Text(), err)
	}
	if !sc.Scan() { // column names
		return nil, false, nil
	}
	lines := 0
	from := since.UTC().Truncate(time.Microsecond)
	for sc.Scan() {
		s, err := parseStepLine(sc.Text())
		if err != nil {
			return nil, false, err
		}
		lines++
		if s.Rows > 0 && !s.Start.Before(from) {
			steps = append(steps, s)
		}
	}
	return steps, lines == kept, sc.Err()
}

// parseStepLine parses one step line of a flight dump: step, start, rows,
// then the await, publish, forward, sample, reply and total times in ms.
func parseStepLine(line string) (api.StepTiming, error) {
	var s api.StepTiming
	bad := func(err error) (api.StepTiming, error) {
		return api.StepTiming{}, fmt.Errorf("flight dump: step line %q: %w", line, err)
	}
	f := strings.Fields(line)
	if len(f) != 9 {
		return api.StepTiming{}, fmt.Errorf("flight dump: step line %q", line)
	}
	var err error
	if s.Step, err = strconv.ParseUint(f[0], 10, 64); err != nil {
		return bad(err)
	}
	if s.Start, err = time.Parse("2006-01-02T15:04:05.000000", f[1]); err != nil {
		return bad(err)
	}
	if s.Rows, err = strconv.Atoi(f[2]); err != nil {
		return bad(err)
	}
	for j, dst := range []*float64{&s.AwaitMs, &s.PublishMs, &s.ForwardMs, &s.SampleMs, &s.ReplyMs, &s.TotalMs} {
		if *dst, err = strconv.ParseFloat(f[3+j], 64); err != nil {
			return bad(err)
		}
	}
	return s, nil
}
