package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/migrate"
)

// The progress bar rewrites one line in place and clears it at the end, so the table printed
// after it starts on a clean line; off a terminal there is no bar (nil) and nothing is written.
func TestProgressBar(t *testing.T) {
	var buf bytes.Buffer
	b := newProgressBar(&buf, 4)
	b.result(migrate.Result{Status: migrate.StatusApplied})
	b.result(migrate.Result{Status: migrate.StatusBlocked})
	b.pause(2, 30*time.Second)
	b.result(migrate.Result{Status: migrate.StatusAtTarget})
	b.finish()
	out := buf.String()
	if strings.Contains(out, "\n") {
		t.Errorf("the bar wrote a newline: %q", out)
	}
	bars := regexp.MustCompile(`\[[= ]{30}\]`).ReplaceAllString(out, "[]")
	for _, want := range []string{
		"[] 0/4  done 0", "[] 1/4  done 1  blocked 0  failed 0",
		"[] 2/4  done 1  blocked 1  failed 0  pausing 30s before the next batch", "[] 3/4  done 2  blocked 1",
	} {
		if !strings.Contains(bars, want) {
			t.Errorf("bar output lacks %q: %q", want, out)
		}
	}
	if !strings.HasSuffix(out, "\r\033[K") {
		t.Errorf("the bar is not cleared at the end: %q", out)
	}
	var none *progressBar
	none.result(migrate.Result{})
	none.pause(1, time.Second)
	none.finish()
}

func TestOutcomeExitCodes(t *testing.T) {
	for _, tc := range []struct {
		statuses []migrate.Status
		code     int
	}{
		{[]migrate.Status{migrate.StatusApplied, migrate.StatusAtTarget, migrate.StatusPast}, exitOK},
		{[]migrate.Status{migrate.StatusApplied, migrate.StatusBlocked}, exitBlocked},
		{[]migrate.Status{migrate.StatusConflict}, exitBlocked},
		{[]migrate.Status{migrate.StatusBlocked, migrate.StatusRefused}, exitRefused},
		{[]migrate.Status{migrate.StatusRefused, migrate.StatusNotStarted}, exitError},
		{[]migrate.Status{migrate.StatusInterrupted}, exitError},
	} {
		err := outcome(tc.statuses, "are")
		code := exitOK
		if ce, ok := err.(codedError); ok {
			code = ce.code
		}
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d (%v)", tc.statuses, code, tc.code, err)
		}
	}
	if got := summary([]migrate.Status{migrate.StatusApplied, migrate.StatusApplied, migrate.StatusBlocked}); got != "3 groups: 2 applied, 1 blocked" {
		t.Errorf("summary %q", got)
	}
}
