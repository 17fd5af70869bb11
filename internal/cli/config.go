package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// clientConfig is the file `engrams dev` writes for the CLI.
type clientConfig struct {
	URL   string `json:"url"`
	Token string `json:"token"`
}

// DefaultConfigPath returns $ENGRAMS_CONFIG, or engrams/config.json in the
// user config directory (os.UserConfigDir).
func DefaultConfigPath() (string, error) {
	return configPath(os.Getenv)
}

func configPath(getenv func(string) string) (string, error) {
	if p := getenv("ENGRAMS_CONFIG"); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("find the user config directory: %w (set ENGRAMS_CONFIG)", err)
	}
	return filepath.Join(dir, "engrams", "config.json"), nil
}

// WriteClientConfig writes the URL and token the CLI uses by default to
// path (see DefaultConfigPath), readable only by the user (mode 0600; its
// directory is created 0700). The file is replaced atomically.
func WriteClientConfig(path, url, token string) error {
	b, err := json.MarshalIndent(clientConfig{URL: url, Token: token}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode client config: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create config directory %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".config-*.json")
	if err != nil {
		return fmt.Errorf("write client config %s: %w", path, err)
	}
	defer os.Remove(f.Name()) // no-op after the rename
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("write client config %s: %w", path, err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("write client config %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write client config %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write client config %s: %w", path, err)
	}
	return nil
}

// readClientConfig reads the config file; a missing file is an empty config.
func readClientConfig(getenv func(string) string) (clientConfig, error) {
	var cfg clientConfig
	path, err := configPath(getenv)
	if err != nil {
		return cfg, nil // nowhere to look: flags and env are all there is
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, nil
	}
	if err != nil {
		return cfg, fmt.Errorf("read client config: %w", err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return cfg, fmt.Errorf("read client config %s: %w (fix or delete it, or run `engrams dev` again)", path, err)
	}
	return cfg, nil
}
