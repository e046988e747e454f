package main

import (
	"github.com/spf13/pflag"

	"github.com/tpcoord/tpcoord/internal/flaglayer"
)

// layerConfig fills the flags the command line did not set from TPC_*
// variables and the --config file (flaglayer); its errors exit 2.
func layerConfig(fs *pflag.FlagSet) error {
	if err := flaglayer.Apply(fs); err != nil {
		return &exitError{code: exitConfig, err: err}
	}
	return nil
}
