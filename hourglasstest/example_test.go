package hourglasstest_test

import (
	"context"
	"fmt"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/hourglasstest"
)

// New, for code outside a test (an example, a TestMain, a program trying
// Hourglass out); a test calls Start, which fails the test on an error
// and closes the Env when the test ends.
func ExampleNew() {
	env, err := hourglasstest.New(context.Background(), hourglasstest.Options{})
	if err != nil {
		panic(err)
	}
	defer env.Close()

	c, err := env.NewClient()
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if _, err := c.Enqueue(ctx, client.Task{ID: "welcome-42", Queue: "default"}); err != nil {
		panic(err)
	}
	ok, err := c.Exists(ctx, "welcome-42")
	fmt.Println(ok, err)
	// Output: true <nil>
}
