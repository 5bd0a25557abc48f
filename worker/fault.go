package worker

// faultAfterPop, when set, runs after a pop that returned entries and
// before they are claimed or run. Only builds with the faultinject tag
// set it (fault_inject.go), for tests that stop the worker process at
// that point; otherwise it is nil and costs a nil check per pop.
var faultAfterPop func()
