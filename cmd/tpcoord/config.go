package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// layerConfig fills every flag the command line did not set, first from the
// environment (TPC_<NAME>, dashes as underscores), then from the YAML file
// named by --config (keys are flag names). Precedence: flag > env > file >
// default. Unknown keys in the file are an error that names them.
func layerConfig(fs *pflag.FlagSet) error {
	var file map[string]any
	if f := fs.Lookup("config"); f != nil {
		path := f.Value.String()
		if !f.Changed {
			if v, ok := os.LookupEnv(envName("config")); ok {
				path = v
			}
		}
		if path != "" {
			data, err := os.ReadFile(path)
			if err != nil {
				return configError("config: %v", err)
			}
			if err := yaml.Unmarshal(data, &file); err != nil {
				return configError("config: %s: %v", path, err)
			}
			var unknown []string
			for k := range file {
				if fs.Lookup(strings.ReplaceAll(k, "_", "-")) == nil || k == "config" {
					unknown = append(unknown, k)
				}
			}
			if len(unknown) > 0 {
				sort.Strings(unknown)
				return configError("config: %s: unknown keys %v", path, unknown)
			}
		}
	}
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "config" {
			return
		}
		if v, ok := os.LookupEnv(envName(f.Name)); ok {
			if e := f.Value.Set(v); e != nil {
				err = configError("%s (from %s): %v", f.Name, envName(f.Name), e)
			}
			return
		}
		for _, key := range []string{f.Name, strings.ReplaceAll(f.Name, "-", "_")} {
			if v, ok := file[key]; ok {
				if e := setFromYAML(f, v); e != nil {
					err = configError("%s (from config file): %v", key, e)
				}
				return
			}
		}
	})
	return err
}

func envName(flag string) string {
	return "TPC_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

func setFromYAML(f *pflag.Flag, v any) error {
	if list, ok := v.([]any); ok {
		parts := make([]string, len(list))
		for i, x := range list {
			parts[i] = fmt.Sprint(x)
		}
		return f.Value.Set(strings.Join(parts, ","))
	}
	return f.Value.Set(fmt.Sprint(v))
}
