//go:build faultinject

package worker

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// HG_FAULT=stop-after-pop makes the process stop itself (SIGSTOP)
// right after its first pop that returned tasks, as a process paused
// between Redis's reply and its handling would be. The end-to-end test
// that uses it builds the worker with -tags faultinject
// (testenv.BuildFaultBinary) and resumes the process with SIGCONT.
//
// A stop is not instant: the kernel stops the other threads when they
// are next scheduled, and on a busy machine the popping goroutine could
// meanwhile go on to claim, run and pop more. So the hook waits for the
// SIGCONT before it returns, and a concurrent pop's hook waits in
// once.Do: nothing popped runs before the process has been stopped and
// continued.
func init() {
	if os.Getenv("HG_FAULT") != "stop-after-pop" {
		return
	}
	var once sync.Once
	faultAfterPop = func() {
		once.Do(func() {
			cont := make(chan os.Signal, 1)
			signal.Notify(cont, syscall.SIGCONT)
			defer signal.Stop(cont)
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			<-cont
		})
	}
}
