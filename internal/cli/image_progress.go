package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
)

// followJob finishes `image enable` and `image refresh`: with noWait it
// reports the queued job; otherwise it shows the job's progress on stderr
// until it ends, then prints the image (or the failure, exiting non-zero).
func (a imageCmds) followJob(cmd *cobra.Command, c *client.Client, r apiv1.ImageJobResponse, noWait bool) error {
	out, name := a.termOut(cmd.OutOrStdout()), r.Image.Name
	if noWait {
		if a.jsonOut {
			return printJSON(out, r)
		}
		fmt.Fprintf(out, "image %s: %s job %s is %s; follow it with `engrams image jobs %s`\n", name, r.Job.Kind, r.Job.ID, r.Job.State, name)
		return nil
	}
	job := r.Job
	if !jobEnded(job) {
		p := a.newProgress(cmd.ErrOrStderr(), name)
		var err error
		job, err = c.Images().WaitJob(cmd.Context(), job.ID, a.opts.PollInterval, p.update)
		p.end()
		if errors.Is(err, context.Canceled) {
			return &hintError{err: fmt.Errorf("stopped waiting for image %s", name),
				hint: "the job goes on without you: follow it with `engrams image jobs " + name + "`"}
		}
		if err != nil {
			return fmt.Errorf("image %s: %w", name, err)
		}
	}
	img, err := c.Images().Get(cmd.Context(), r.Image.ID)
	if err != nil {
		return fmt.Errorf("image %s: job %s is %s, but reading the image failed: %w", name, job.ID, job.State, err)
	}
	if a.jsonOut {
		if err := printJSON(out, apiv1.ImageJobResponse{Image: img, Job: job}); err != nil {
			return err
		}
	}
	if job.State == apiv1.ImageJobFailed {
		return jobFailed(a.termOut(cmd.ErrOrStderr()), img, job)
	}
	if !a.jsonOut {
		return printReady(out, img, job)
	}
	return nil
}

// jobFailed prints the end of the warm-up's output and returns the error.
func jobFailed(w io.Writer, img apiv1.Image, job apiv1.ImageJob) error {
	printTail(w, job.OutputTail)
	hint := "fix the image or its --warmup and run `engrams image enable` again (a failed image is tried again); see `engrams image jobs " + img.Name + "`"
	if job.Kind == "refresh" {
		hint = "the image keeps its current base snapshot; see `engrams image jobs " + img.Name + "`"
	}
	return &hintError{err: fmt.Errorf("%s of image %s failed: %s", job.Kind, img.Name, job.Error), hint: hint}
}

// printTail shows a warm-up's last output, indented.
func printTail(w io.Writer, tail string) {
	tail = strings.TrimRight(tail, "\n")
	if tail == "" {
		return
	}
	fmt.Fprintln(w, "warm-up output (last lines):")
	for line := range strings.Lines(tail) {
		fmt.Fprintln(w, "  "+strings.TrimRight(line, "\r\n"))
	}
}

func printReady(w io.Writer, img apiv1.Image, job apiv1.ImageJob) error {
	fmt.Fprintf(w, "image %s is ready\n", img.Name)
	tw := newTable(w)
	row(tw, "Ref:", img.Ref)
	row(tw, "Digest:", img.Digest)
	row(tw, "Base snapshot:", img.BaseSnapshotID)
	row(tw, "Stages:", stageTimes(job.StagesMS))
	row(tw, "Took:", totalTime(job.StagesMS))
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, warning := range job.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warning)
	}
	_, err := fmt.Fprintf(w, "start a session from it with `engrams session create --image %s`\n", img.Name)
	return err
}

// stageOrder is the order jobs go through their stages; others follow.
var stageOrder = []string{"resolve", "pull", "rootfs", "chunks", "place", "fetch_rootfs", "boot", "warmup", "snapshot", "upload", "on_host"}

// stageTimes lists stage times in the order stages run.
func stageTimes(ms map[string]int64) string {
	keys := slices.SortedFunc(maps.Keys(ms), func(a, b string) int {
		ia, ib := slices.Index(stageOrder, a), slices.Index(stageOrder, b)
		switch {
		case ia < 0 && ib < 0:
			return strings.Compare(a, b)
		case ia < 0:
			return 1
		case ib < 0:
			return -1
		}
		return ia - ib
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+" "+millis(ms[k]))
	}
	return strings.Join(parts, ", ")
}

// totalTime sums the stage times ("" when none were recorded).
func totalTime(ms map[string]int64) string {
	if len(ms) == 0 {
		return ""
	}
	var sum int64
	for _, v := range ms {
		sum += v
	}
	return millis(sum)
}

// millis shows a duration in ms: "0.3s", "12.0s", "2m5s".
func millis(ms int64) string {
	if ms < 60_000 {
		return fmt.Sprintf("%.1fs", float64(ms)/1000)
	}
	return (time.Duration(ms) * time.Millisecond).Round(time.Second).String()
}

func jobEnded(j apiv1.ImageJob) bool { return client.ImageJobDone(j) }

// stageLabel is "state" or "state stage".
func stageLabel(j apiv1.ImageJob) string {
	if j.Stage == "" || jobEnded(j) {
		return j.State
	}
	return j.State + " " + j.Stage
}

func percent(done, total int64) int {
	if total <= 0 {
		return 0
	}
	return int(min(max(done, 0), total) * 100 / total)
}

// byteProgress shows done/total in the unit of total: "81.0/180.0 MiB".
func byteProgress(done, total int64) string {
	unit, div := "B", int64(1)
	for i, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		if total < int64(1)<<(10*(i+1)) {
			break
		}
		unit, div = u, int64(1)<<(10*(i+1))
	}
	if div == 1 {
		return fmt.Sprintf("%d/%d B", done, total)
	}
	return fmt.Sprintf("%.1f/%.1f %s", float64(done)/float64(div), float64(total)/float64(div), unit)
}

const barWidth = 20

var spinner = []string{"|", "/", "-", `\`}

// progressLine is the one line a terminal shows for j: a bar with bytes
// when the stage counts them, else a spinner and how long the stage has
// taken so far.
func progressLine(j apiv1.ImageJob, elapsed time.Duration, frame int) string {
	label := stageLabel(j)
	switch {
	case jobEnded(j):
		return label
	case j.BytesTotal > 0:
		filled := int(min(max(j.BytesDone, 0), j.BytesTotal) * barWidth / j.BytesTotal)
		bar := strings.Repeat("=", filled)
		if filled < barWidth {
			bar += ">" + strings.Repeat(" ", barWidth-filled-1)
		}
		return fmt.Sprintf("%s  [%s] %3d%% %s", label, bar, percent(j.BytesDone, j.BytesTotal), byteProgress(j.BytesDone, j.BytesTotal))
	}
	return fmt.Sprintf("%s  %s %s", label, spinner[frame%len(spinner)], elapsed.Round(time.Second))
}

// progress shows an image job's progress: on a terminal one line redrawn
// at every poll, else one line per stage.
type progress struct {
	w     io.Writer
	tty   bool
	name  string
	now   func() time.Time
	last  string    // the stage label last seen
	since time.Time // when it was first seen
	frame int
	drawn bool
}

func (a imageCmds) newProgress(w io.Writer, name string) *progress {
	_, tty := a.terminalFD(w)
	return &progress{w: w, tty: tty, name: name, now: a.opts.Now}
}

func (p *progress) update(j apiv1.ImageJob) {
	label := stageLabel(j)
	changed := label != p.last
	if changed {
		p.last, p.since = label, p.now()
	}
	if !p.tty {
		if changed {
			fmt.Fprintf(p.w, "image %s: %s\n", p.name, label)
		}
		return
	}
	fmt.Fprintf(p.w, "\r%s\x1b[K", progressLine(j, p.now().Sub(p.since), p.frame))
	p.frame++
	p.drawn = true
}

// end finishes the terminal line.
func (p *progress) end() {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}
