// Builds Skaffold with deploy/cluster/build-go.sh: its go.mod pins four modules with replace
// directives, which Go ignores outside the main module, so this main module repeats them.

module partner-integration.local/cluster/go/skaffold

go 1.24.1

require github.com/GoogleContainerTools/skaffold/v2 v2.16.1

replace github.com/alessio/shellescape => github.com/alessio/shellescape v1.4.2
replace github.com/imdario/mergo => github.com/imdario/mergo v0.3.16
replace github.com/docker/docker => github.com/docker/docker v27.5.1+incompatible
replace github.com/docker/cli => github.com/docker/cli v27.5.1+incompatible
replace github.com/spf13/viper => github.com/spf13/viper v1.19.0
replace github.com/buildpacks/lifecycle => github.com/buildpacks/lifecycle v0.20.5
