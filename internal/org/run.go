package org

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Defaults of Runner.
const (
	DefaultConcurrency    = 8
	DefaultAccountTimeout = 2 * time.Minute
)

// Runner runs one function per target, Concurrency at a time, each for at most Timeout.
type Runner struct {
	// Concurrency is how many targets run at once (DefaultConcurrency when 0 or less).
	Concurrency int
	// Timeout bounds each target's run, from its start (DefaultAccountTimeout when 0 or less): a target
	// still running then is cancelled and reported with ErrTimeout, and its slot goes to the next target.
	Timeout time.Duration
	// Clock times the runs; nil: the real clock.
	Clock clock.Clock
	// Done, when set, is told of each target's result once it is final (from the target's goroutine): a
	// progress line, or a test waiting for the targets that answer.
	Done func(t Target, err error)
}

// Result is what one target's run returned: its value, or its error, and how long it took.
type Result[T any] struct {
	Target
	Value T
	Err   error
	Took  time.Duration
}

// TimeoutError is the error of a target that did not finish within the Runner's Timeout.
type TimeoutError struct{ Timeout time.Duration }

func (e TimeoutError) Error() string {
	return fmt.Sprintf("no answer within %s (--account-timeout): the account was left, the others went on", e.Timeout)
}

// Run runs do for every target and returns one result per target, in the order of targets. A target whose do
// returns an error, panics or outlives the Timeout is a result with its error; the others run on. do gets a
// context cancelled at its timeout; a do that ignores it is abandoned (its result discarded). When ctx ends,
// the targets not yet started are results with ctx's error.
func Run[T any](ctx context.Context, r Runner, targets []Target, do func(context.Context, Target) (T, error)) []Result[T] {
	n := r.Concurrency
	if n <= 0 {
		n = DefaultConcurrency
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultAccountTimeout
	}
	clk := r.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	results := make([]Result[T], len(targets))
	slots := make(chan struct{}, n)
	var wg sync.WaitGroup
	for i, t := range targets {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			for j := i; j < len(targets); j++ {
				results[j] = Result[T]{Target: targets[j], Err: ctx.Err()}
			}
			wg.Wait()
			return results
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			results[i] = runOne(ctx, clk, timeout, t, do)
			if r.Done != nil {
				r.Done(t, results[i].Err)
			}
		}()
	}
	wg.Wait()
	return results
}

// runOne runs do for t under its timeout.
func runOne[T any](ctx context.Context, clk clock.Clock, timeout time.Duration, t Target, do func(context.Context, Target) (T, error)) Result[T] {
	start := clk.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan Result[T], 1) // buffered: an abandoned run still ends
	go func() {
		res := Result[T]{Target: t}
		defer func() {
			if p := recover(); p != nil {
				res.Err = fmt.Errorf("panic: %v", p)
			}
			done <- res
		}()
		res.Value, res.Err = do(ctx, t)
	}()
	timer := clk.NewTimer(timeout)
	defer timer.Stop() // before Done is told: a test may then count the timers still waiting
	var res Result[T]
	select {
	case res = <-done:
	case <-timer.C():
		cancel()
		res = Result[T]{Target: t, Err: TimeoutError{timeout}}
	case <-ctx.Done():
		res = Result[T]{Target: t, Err: ctx.Err()}
	}
	res.Took = clk.Since(start)
	return res
}
