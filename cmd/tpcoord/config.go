package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tpcoord/tpcoord/internal/flaglayer"
)

// layerConfig fills the flags the command line did not set from TPC_*
// variables and the --config file (flaglayer); its errors exit 2. A TPC_*
// variable that looks like a typo of one of fs's gets a warning.
func layerConfig(fs *pflag.FlagSet) error {
	flaglayer.WarnStrays(fs)
	return layerConfigQuiet(fs)
}

// layerConfigQuiet is layerConfig without the warnings: launch gives them
// once it will not re-execute itself, so that they come once.
func layerConfigQuiet(fs *pflag.FlagSet) error {
	if err := flaglayer.Apply(fs); err != nil {
		return &exitError{code: exitConfig, err: err}
	}
	return nil
}

// suggestFlag adds "did you mean" to an unknown flag's error.
func suggestFlag(c *cobra.Command, err error) error {
	name, ok := strings.CutPrefix(err.Error(), "unknown flag: ")
	if !ok {
		return err
	}
	if like := flaglayer.Suggest(c.Flags(), name); like != "" {
		return fmt.Errorf("%w; did you mean --%s?", err, like)
	}
	return err
}
