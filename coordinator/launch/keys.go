package launch

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/tpcoord/tpcoord/broadcast"
)

// jobKeyEnv and gossipKeyEnv give a rank the files of the job's message key
// and of its gossip keyring (the agent's --job-key-file, --gossip-key-file).
const (
	jobKeyEnv    = "TPC_JOB_KEY_FILE"
	gossipKeyEnv = "TPC_GOSSIP_KEY_FILE"
)

// makeKeys makes the job's message key and, unless Config.GossipKeyFile
// names one, its gossip key: new ones for every job, written for the ranks
// to 0600 files in a directory of its own, 0700, which removeKeys deletes
// when the job ends. Only the ranks (through their environment) and launch
// know where they are. A local job's gossip is then encrypted like any
// other, although it never leaves loopback: another user of the host
// cannot join it or read its membership.
func (s *Supervisor) makeKeys() error {
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
	if s.cfg.GossipKeyFile != "" {
		return nil
	}
	// A job key is 32 random bytes in base64 on one line: a gossip
	// keyring of one AES-256 key as well.
	gossip, err := broadcast.NewKey()
	if err != nil {
		return err
	}
	if err := broadcast.WriteKeyFile(s.gossipKeyFile(), gossip); err != nil {
		return fmt.Errorf("gossip key: %w", err)
	}
	return nil
}

func (s *Supervisor) keyFile() string { return filepath.Join(s.keyDir, "job.key") }

// gossipKeyFile is the ranks' gossip keyring: the one given, or the job's.
func (s *Supervisor) gossipKeyFile() string {
	if s.cfg.GossipKeyFile != "" {
		return s.cfg.GossipKeyFile
	}
	return filepath.Join(s.keyDir, "gossip.key")
}

// removeKeys deletes the keys' directory, once no rank needs it.
func (s *Supervisor) removeKeys() {
	if s.keyDir == "" {
		return
	}
	if err := os.RemoveAll(s.keyDir); err != nil {
		s.log.Warn("cannot remove the job keys' directory", "dir", s.keyDir, "err", err)
	}
}
