// Package conventions holds repository-wide tests of the source's conventions (../shared/STYLE.md): it has no
// code of its own.
package conventions
