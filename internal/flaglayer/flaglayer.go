// Package flaglayer fills a command's flags from three layers, in this order
// of precedence: the command line, the environment (PREFIX_NAME, dashes as
// underscores), and a YAML file named by the command's --config flag (keys
// are flag names, dashes or underscores), then the flags' defaults. Every
// front end of one configuration struct then accepts the same settings.
package flaglayer

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// Prefix is the environment variables' prefix.
const Prefix = "TPC_"

// Apply fills every flag of fs the command line did not set, first from
// the environment, then from the YAML file named by the "config" flag (if
// fs has one). Unknown keys in the file are an error that names them;
// errors name the flag and where its value came from.
func Apply(fs *pflag.FlagSet) error {
	var file map[string]any
	if f := fs.Lookup("config"); f != nil {
		path := f.Value.String()
		if !f.Changed {
			if v, ok := os.LookupEnv(EnvName("config")); ok {
				path = v
			}
		}
		if path != "" {
			data, err := os.ReadFile(path)
			if err != nil {
				return fmt.Errorf("config: %w", err)
			}
			if err := yaml.Unmarshal(data, &file); err != nil {
				return fmt.Errorf("config: %s: %w", path, err)
			}
			var unknown []string
			for k := range file {
				if fs.Lookup(strings.ReplaceAll(k, "_", "-")) == nil || k == "config" {
					unknown = append(unknown, k)
				}
			}
			if len(unknown) > 0 {
				sort.Strings(unknown)
				return fmt.Errorf("config: %s: unknown keys %v", path, unknown)
			}
		}
	}
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "config" {
			return
		}
		if v, ok := os.LookupEnv(EnvName(f.Name)); ok {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("%s (from %s): %w", f.Name, EnvName(f.Name), e)
			}
			return
		}
		for _, key := range []string{f.Name, strings.ReplaceAll(f.Name, "-", "_")} {
			if v, ok := file[key]; ok {
				if e := setFromYAML(f, v); e != nil {
					err = fmt.Errorf("%s (from config file): %w", key, e)
				}
				return
			}
		}
	})
	return err
}

// EnvName is the environment variable that sets flag.
func EnvName(flag string) string {
	return Prefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
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
