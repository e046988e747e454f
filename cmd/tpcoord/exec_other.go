//go:build !unix

package main

import "errors"

func execSelf(string, []string, []string) error {
	return errors.New("re-executing is not supported on this platform")
}
