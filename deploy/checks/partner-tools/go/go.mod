module partnertools

go 1.24

require golang.org/x/oauth2 v0.30.0
