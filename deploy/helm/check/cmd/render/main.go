// Command render writes the otel-rl chart's manifest for every values case to -out/<case>.yaml (`helm template`
// through Helm's own library): tests/deploy/ checks the collector configs and rules in them with the real tools.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/otel-rl/otel-rl/deploy/helm/check"
)

func main() {
	out := flag.String("out", "", "folder to write <case>.yaml into")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "render: -out is required")
		os.Exit(2)
	}
	log.SetOutput(io.Discard) // Helm logs each symbolic link of files/ it follows.
	if err := check.WriteCases(*out); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
}
