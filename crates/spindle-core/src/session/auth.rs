//! What a session does with `auth` rules' answers: a check's result, the
//! user it granted, and the credentials a connection was granted before.

use super::*;

impl Session {
    /// The driver's answer to [`Step::Authenticate`]: the file is opened
    /// for a granted user ([`Step::Open`]); a denied one gets a 401 that
    /// asks again, and a check that could not run a 503.
    pub fn authenticated(
        &mut self,
        cfg: &SessionConfig,
        check: AuthCheck,
        checked: Checked,
    ) -> Step {
        assert_eq!(
            self.state,
            State::AwaitAuth,
            "authenticated() without Step::Authenticate"
        );
        let path = self.auth_path.take().expect("credentials being checked");
        let req = self.current.take().expect("current request");
        let keep_alive = self.current_keep_alive;
        let (announce, head_only) = (req.minor_version == 0, req.method == Method::Head);
        match checked {
            Checked::Granted => {
                let memo = req
                    .authorization
                    .as_deref()
                    .map_or(0, |f| check.auth.memo(f));
                self.granted = Some(Box::new(Granted {
                    generation: check.auth.generation,
                    memo,
                    user: check.credentials.into_user(),
                }));
                self.authenticated = true;
                self.current = Some(req);
                self.state = State::AwaitOpen;
                Step::Open(OpenRequest {
                    path,
                    root: self.root,
                })
            }
            Checked::Denied => {
                self.refusal = Some(crate::rules::Refusal::Password);
                self.last_req = Some(req);
                let challenge = check.auth.challenge();
                let extra = [("WWW-Authenticate", challenge.as_str())];
                self.respond_error(cfg, 401, keep_alive, announce, head_only, &extra)
            }
            Checked::Busy => {
                self.last_req = Some(req);
                self.respond_error(cfg, 503, keep_alive, announce, head_only, error_extra(503))
            }
        }
    }

    /// The user the last response's request was authenticated as, if an
    /// `auth` rule asked (the access log's user field).
    pub fn user(&self) -> Option<&[u8]> {
        match (&self.granted, self.authenticated) {
            (Some(g), true) => Some(&g.user),
            _ => None,
        }
    }

    /// Whether `req` carries the `Authorization` field last granted on
    /// this connection, under the same loading of `auth`'s file.
    pub(super) fn granted_again(&self, auth: &crate::auth::Auth, req: &Request) -> bool {
        match (&self.granted, req.authorization.as_deref()) {
            (Some(g), Some(field)) => g.generation == auth.generation && g.memo == auth.memo(field),
            _ => false,
        }
    }
}
