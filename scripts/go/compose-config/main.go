// compose-config loads a Compose file the way Docker Compose does (compose-go: the Compose
// specification's schema, interpolation, normalization and consistency checks) and prints the
// resolved project as JSON, like `docker compose config --format json`. kubecast's tests use
// it to check docker-compose.yml without a container engine.
//
// usage: compose-config FILE
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/compose-spec/compose-go/v2/cli"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: compose-config FILE")
		os.Exit(2)
	}
	options, err := cli.NewProjectOptions(
		[]string{os.Args[1]},
		cli.WithOsEnv,
		cli.WithDotEnv,
		cli.WithConsistency(true),
	)
	if err != nil {
		fmt.Fprintf(os.Stderr, "compose-config: %v\n", err)
		os.Exit(1)
	}
	project, err := options.LoadProject(context.Background())
	if err != nil {
		fmt.Fprintf(os.Stderr, "compose-config: %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	out, err := project.MarshalJSON()
	if err != nil {
		fmt.Fprintf(os.Stderr, "compose-config: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}
