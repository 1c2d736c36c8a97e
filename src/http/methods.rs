//! 405 `method-not-allowed` with `Allow` for a known path asked with the wrong method.
//!
//! Every route is registered with a method guard, so a request whose path exists but whose
//! method does not falls through to the default service; there [`allowed`] tells a known path
//! (answer 405 and list its methods) from an unknown one (404). The methods of each path come
//! from the OpenAPI document the routes generate — the same registration, never a second list
//! — plus the pages served beside the API (the web client, `/openapi.json`, `/docs`).
//!
//! HEAD is answered wherever GET is (RFC 9110 §9.3.2): [`head_as_get`] routes it to the GET
//! handler and answers its status and headers without a body, and `Allow` lists HEAD beside
//! every GET.

use std::sync::LazyLock;

use actix_web::body::{self, BodySize, BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Method;

/// One segment of a path template.
#[derive(Debug, PartialEq)]
enum Segment {
    Literal(String),
    /// `{name}`: any one non-empty segment.
    Param,
    /// Matches whatever follows, e.g. Swagger UI's assets under `/docs/`.
    Rest,
}

/// Path templates and the methods each takes.
#[derive(Debug, Default)]
pub struct Routes {
    templates: Vec<(Vec<Segment>, Vec<Method>)>,
}

impl Routes {
    /// The templates of `spec`'s paths, plus `pages` (GET-only paths served beside the API; a
    /// trailing `*` matches any rest).
    pub fn new(spec: &utoipa::openapi::OpenApi, pages: &[&str]) -> Self {
        let mut routes = Routes::default();
        for (path, item) in &spec.paths.paths {
            let ops = [
                (Method::GET, item.get.is_some()),
                (Method::PUT, item.put.is_some()),
                (Method::POST, item.post.is_some()),
                (Method::DELETE, item.delete.is_some()),
                (Method::PATCH, item.patch.is_some()),
                (Method::HEAD, item.head.is_some()),
                (Method::OPTIONS, item.options.is_some()),
            ];
            let methods = ops.into_iter().filter(|(_, on)| *on).map(|(m, _)| m);
            routes.add(path, methods.collect());
        }
        for page in pages {
            routes.add(page, vec![Method::GET]);
        }
        routes
    }

    /// Adds `template` with `methods`, and HEAD right after a GET (every GET answers HEAD).
    fn add(&mut self, template: &str, methods: Vec<Method>) {
        let methods = methods
            .into_iter()
            .flat_map(|m| match m {
                Method::GET => vec![Method::GET, Method::HEAD],
                other => vec![other],
            })
            .fold(Vec::new(), |mut all, m| {
                if !all.contains(&m) {
                    all.push(m);
                }
                all
            });
        let segments = template
            .split('/')
            .skip(1)
            .map(|s| match s {
                "*" => Segment::Rest,
                _ if s.starts_with('{') && s.ends_with('}') => Segment::Param,
                _ => Segment::Literal(s.to_owned()),
            })
            .collect();
        self.templates.push((segments, methods));
    }

    /// The methods `path` takes, or `None` when no route has that path.
    pub fn allowed(&self, path: &str) -> Option<Vec<Method>> {
        let given: Vec<&str> = path.split('/').skip(1).collect();
        let mut out: Option<Vec<Method>> = None;
        for (template, methods) in &self.templates {
            if matches(template, &given) {
                let all = out.get_or_insert_with(Vec::new);
                for m in methods {
                    if !all.contains(m) {
                        all.push(m.clone());
                    }
                }
            }
        }
        out
    }
}

fn matches(template: &[Segment], given: &[&str]) -> bool {
    let mut given = given.iter();
    for segment in template {
        match (segment, given.next()) {
            (Segment::Rest, _) => return true,
            (Segment::Param, Some(s)) if !s.is_empty() => {}
            (Segment::Literal(l), Some(s)) if l == s => {}
            _ => return false,
        }
    }
    given.next().is_none()
}

/// This server's routes, read once from its OpenAPI document.
static ROUTES: LazyLock<Routes> = LazyLock::new(|| Routes::new(&super::openapi(), &super::pages()));

/// Reads the routes now (at startup) rather than on the first refused request.
pub fn prepare() {
    LazyLock::force(&ROUTES);
}

/// The methods `path` takes on this server, or `None` when it has no such path.
pub fn allowed(path: &str) -> Option<Vec<Method>> {
    ROUTES.allowed(path)
}

/// Whether `method` on `path` will be answered 405: the path exists, the method does not.
pub fn refused(method: &Method, path: &str) -> bool {
    allowed(path).is_some_and(|methods| !methods.contains(method))
}

/// Answers HEAD on a path that takes GET by running the GET route: the same status and headers,
/// no body. The server never writes a HEAD answer's body, but it would still read a streamed
/// one to its end; an event stream never ends, so its body is dropped here and the stream
/// with it. Anything else passes through.
pub async fn head_as_get<B: MessageBody + 'static>(
    mut req: ServiceRequest,
    next: impl super::layers::Rest<B>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let head = req.method() == Method::HEAD
        && allowed(req.match_info().as_str()).is_some_and(|m| m.contains(&Method::GET));
    if !head {
        return Ok(next.call(req).await?.map_into_boxed_body());
    }
    req.head_mut().method = Method::GET;
    let res = next.call(req).await?;
    Ok(match res.response().body().size() {
        BodySize::Stream => res.map_body(|_, _| BoxBody::new(body::None::new())),
        _ => res.map_into_boxed_body(),
    })
}

/// The `Allow` value for `methods`, e.g. `GET, DELETE`.
pub fn allow_header(methods: &[Method]) -> String {
    methods
        .iter()
        .map(Method::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_path_lists_the_methods_of_every_route_on_it() {
        let spec = super::super::openapi();
        let routes = Routes::new(&spec, &["/", "/docs/*"]);
        assert_eq!(
            routes.allowed("/v1/sessions/abc"),
            Some(vec![Method::GET, Method::HEAD, Method::DELETE])
        );
        assert_eq!(
            routes.allowed("/v1/sessions/abc/agents/main/plan"),
            Some(vec![Method::GET, Method::HEAD, Method::PUT])
        );
        assert_eq!(
            routes.allowed("/v1/sessions"),
            Some(vec![Method::GET, Method::HEAD, Method::POST])
        );
        assert_eq!(routes.allowed("/"), Some(vec![Method::GET, Method::HEAD]));
        assert_eq!(
            routes.allowed("/docs/x/y.js"),
            Some(vec![Method::GET, Method::HEAD])
        );
    }

    #[test]
    fn unknown_paths_empty_segments_and_extra_segments_are_not_routes() {
        let spec = super::super::openapi();
        let routes = Routes::new(&spec, &["/"]);
        for path in [
            "/v1/nothing",
            "/v1/sessions//agents",
            "/v1/sessions/abc/agents/main/plan/x",
            "/v1",
            "/x",
        ] {
            assert_eq!(routes.allowed(path), None, "{path}");
        }
    }
}
