// Package config owns zsched's configuration: the scheduler.toml schema and its
// built-in defaults, the [defaults] overlay, clause selection by ZMailer globs,
// validation errors that name the file, line and key at fault, durations with
// days, and the transport-agent command line (environment words, $host and
// $channel substitution, host binding).
//
// The scheduling core imports this package, so it stays free of os/exec and net;
// only Load touches the file system.
//
// Loading happens in three layers, each overlaying the one before: the built-in
// defaults (Default), the file's [defaults] table wherever it stands, and each
// [[clause]]'s own keys. Values derived from others (idlemax, the feed order,
// relative paths) are resolved after the overlay, so a clause that changes
// interval also moves its default idlemax (ZMailer derived it from the raw
// clause, quirk Q7).
package config
