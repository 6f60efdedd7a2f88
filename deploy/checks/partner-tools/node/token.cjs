// A partner's Node program: a client-credentials token from simple-oauth2, in its default mode
// (authorizationMethod "header": HTTP Basic) or with the credentials in the body.
//   node token.cjs MODE TOKEN_URL CLIENT_ID CLIENT_SECRET     (MODE: default or body)
const { ClientCredentials } = require("simple-oauth2");

const [mode, tokenUrl, id, secret] = process.argv.slice(2);
const url = new URL(tokenUrl);
const client = new ClientCredentials({
  client: { id, secret },
  auth: { tokenHost: url.origin, tokenPath: url.pathname },
  ...(mode === "body" ? { options: { authorizationMethod: "body" } } : {}),
});
client.getToken({}).then(
  (token) => console.log(token.token.access_token),
  (err) => {
    console.error(err.message, err.data?.payload ?? "");
    process.exit(1);
  },
);
