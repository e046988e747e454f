// Package flaglayer fills a command's flags from three layers, in this order
// of precedence: the command line, the environment (PREFIX_NAME, dashes as
// underscores), and a YAML file named by the command's --config flag (keys
// are flag names, dashes or underscores), then the flags' defaults. Every
// front end of one configuration struct then accepts the same settings.
package flaglayer

import (
	"fmt"
	"os"
	"slices"
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
	file, err := readFile(fs, configPath(fs))
	if err != nil {
		return err
	}
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

// configPath is the file the "config" flag names: from the command line,
// else from the environment; "" for none (or no such flag).
func configPath(fs *pflag.FlagSet) string {
	f := fs.Lookup("config")
	if f == nil {
		return ""
	}
	if v, ok := os.LookupEnv(EnvName("config")); ok && !f.Changed {
		return v
	}
	return f.Value.String()
}

// readFile reads the YAML file at path (none if ""), refusing keys that
// name no flag of fs.
func readFile(fs *pflag.FlagSet, path string) (map[string]any, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var file map[string]any
	if err := yaml.Unmarshal(data, &file); err != nil {
		return nil, fmt.Errorf("config: %s: %w", path, err)
	}
	var unknown []string
	for k := range file {
		if fs.Lookup(strings.ReplaceAll(k, "_", "-")) == nil || k == "config" {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("config: %s: unknown keys %v", path, unknown)
	}
	return file, nil
}

// Rereadable reports whether the file the "config" flag names, if any,
// can be read again by another Apply (a re-executed process, say): it is
// a regular file, not a pipe such as <(...).
func Rereadable(fs *pflag.FlagSet) bool {
	path := configPath(fs)
	if path == "" {
		return true
	}
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// Args renders the flags of fs that are set, by the command line or by
// Apply (from the environment or the file), as command-line arguments
// ("--name=value"; a list's values joined by commas), skipping the flags
// named in skip: what passes a command's settings on to a process it
// starts. A flag left at its default is left out.
func Args(fs *pflag.FlagSet, skip ...string) []string {
	var args []string
	fs.VisitAll(func(f *pflag.Flag) {
		if slices.Contains(skip, f.Name) || !f.Changed && f.Value.String() == f.DefValue {
			return
		}
		v := f.Value.String()
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			v = strings.Join(sv.GetSlice(), ",")
		}
		args = append(args, fmt.Sprintf("--%s=%s", f.Name, v))
	})
	return args
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
