package goworkflows_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEProgram: the complete program in the repository's README is
// this package's Example (example_test.go), which go test runs and checks:
// the README block is the Example file with "package main" and "func
// main()" for the test package and "func Example()", and without the
// Output comment. So the README's program cannot rot.
func TestREADMEProgram(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```go\n(package main\n.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no ```go block holding a package main")
	}
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.NewReplacer(
		"package goworkflows_test\n", "package main\n",
		"func Example() {\n", "func main() {\n",
		"\t// Output: hello, durofs\n", "",
	).Replace(string(example))
	if got := string(m[1]); got != want {
		t.Errorf("README.md's program is not example_test.go's Example; make them agree.\nREADME:\n%s\nexample_test.go as a program:\n%s", got, want)
	}
}
