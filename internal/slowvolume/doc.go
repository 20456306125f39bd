// Package slowvolume holds tests only: kaas broker processes over a shared
// folder served by powerfs (FUSE) mounts, one per broker, whose namespace
// calls the tests hold as a network file system's server holds them
// (docs/volume.md, "Stalls"), to show the coordination contract holds on
// a slow volume: a former owner's late write never replaces a newer
// owner's, and an acknowledged commit is never lost.
package slowvolume
