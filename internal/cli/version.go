package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/engrams/engrams/api/apiv1"
)

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the client's and the server's versions",
		Long: `Print this CLI's version and the coordinator's: its build, the host link
protocol and guest API versions, and the replica that answered.`,
		Example: `  engrams version
  engrams version --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			v, verr := c.Version(cmd.Context())
			if a.jsonOut {
				out := struct {
					Client string         `json:"client"`
					Server *apiv1.Version `json:"server,omitempty"`
				}{Client: a.opts.Version}
				if verr == nil {
					out.Server = &v
				}
				if err := printJSON(cmd.OutOrStdout(), out); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "client: %s\n", a.opts.Version)
				if verr == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "server: %s (host link protocol %d, guest API %d, replica %s)\n",
						v.Version, v.HostlinkProtocol, v.GuestAPI, v.ReplicaID)
				}
			}
			if verr != nil {
				return fmt.Errorf("get server version: %w", verr)
			}
			return nil
		},
	}
}
