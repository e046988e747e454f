//go:build !unix

package rankproc

import "errors"

func execSelf(string, []string, []string) error {
	return errors.New("re-executing is not supported on this platform")
}
