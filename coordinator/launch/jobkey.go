package launch

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/tpcoord/tpcoord/broadcast"
)

// jobKeyEnv gives a rank the file of the job's message key (the agent's
// --job-key-file).
const jobKeyEnv = "TPC_JOB_KEY_FILE"

// makeJobKey makes the job's message key, a new one for every job, and
// writes it for the ranks to a 0600 file in a directory of its own, 0700,
// which removeJobKey deletes when the job ends. Only the ranks (through
// their environment) and launch know where it is.
func (s *Supervisor) makeJobKey() error {
	key, err := broadcast.NewKey()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "tpcoord-job-") // mode 0700
	if err != nil {
		return fmt.Errorf("job key: %w", err)
	}
	s.keyDir, s.key = dir, key
	if err := broadcast.WriteKeyFile(s.keyFile(), key); err != nil {
		return fmt.Errorf("job key: %w", err)
	}
	return nil
}

func (s *Supervisor) keyFile() string { return filepath.Join(s.keyDir, "job.key") }

// removeJobKey deletes the key's directory, once no rank needs it.
func (s *Supervisor) removeJobKey() {
	if s.keyDir == "" {
		return
	}
	if err := os.RemoveAll(s.keyDir); err != nil {
		s.log.Warn("cannot remove the job key's directory", "dir", s.keyDir, "err", err)
	}
}
