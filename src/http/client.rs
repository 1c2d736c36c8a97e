//! The reference web client (`web/`), embedded in the binary (no CDN, nothing fetched at run time).

use actix_web::{web, HttpResponse};

const FILES: &[(&str, &str, &str)] = &[
    (
        "/",
        "text/html; charset=utf-8",
        include_str!("../../web/index.html"),
    ),
    (
        "/app.js",
        "text/javascript; charset=utf-8",
        include_str!("../../web/app.js"),
    ),
    (
        "/markdown.js",
        "text/javascript; charset=utf-8",
        include_str!("../../web/markdown.js"),
    ),
    (
        "/credential.js",
        "text/javascript; charset=utf-8",
        include_str!("../../web/credential.js"),
    ),
    (
        "/i18n.js",
        "text/javascript; charset=utf-8",
        include_str!("../../web/i18n.js"),
    ),
    (
        "/api.js",
        "text/javascript; charset=utf-8",
        include_str!("../../web/api.js"),
    ),
    (
        "/questions.js",
        "text/javascript; charset=utf-8",
        include_str!("../../web/questions.js"),
    ),
    (
        "/sessions.js",
        "text/javascript; charset=utf-8",
        include_str!("../../web/sessions.js"),
    ),
    (
        "/history.js",
        "text/javascript; charset=utf-8",
        include_str!("../../web/history.js"),
    ),
    (
        "/transcript.js",
        "text/javascript; charset=utf-8",
        include_str!("../../web/transcript.js"),
    ),
    (
        "/style.css",
        "text/css; charset=utf-8",
        include_str!("../../web/style.css"),
    ),
];

/// The paths of the client's files.
pub fn paths() -> Vec<&'static str> {
    FILES.iter().map(|(path, _, _)| *path).collect()
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    for (path, content_type, body) in FILES {
        cfg.route(
            path,
            web::get().to(move || async move {
                HttpResponse::Ok()
                    .content_type(*content_type)
                    .insert_header(("Cache-Control", "no-cache"))
                    .insert_header(("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"))
                    .body(*body)
            }),
        );
    }
}
