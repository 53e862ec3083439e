// gospin [DURATION]: a pure-Go busy loop, main.main -> main.outer ->
// main.middle -> main.leaf (test_go.py builds it with and without
// .symtab: -ldflags=-s leaves only .gopclntab to name its functions).
package main

import (
	"fmt"
	"os"
	"time"
)

//go:noinline
func leaf(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += i * i
	}
	return s
}

//go:noinline
func middle(n int) int { return leaf(n) + 1 }

//go:noinline
func outer(n int) int { return middle(n) + 1 }

func main() {
	d := 30 * time.Second
	if len(os.Args) > 1 {
		v, err := time.ParseDuration(os.Args[1])
		if err != nil {
			os.Exit(2)
		}
		d = v
	}
	end := time.Now().Add(d)
	t := 0
	for time.Now().Before(end) {
		t += outer(1000000)
	}
	fmt.Println(t)
}
