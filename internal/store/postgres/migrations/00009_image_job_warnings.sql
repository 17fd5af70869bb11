-- An image job records its warnings (issue 13): what the root filesystem left
-- out of the image (device nodes and FIFOs, never created from an image). A
-- JSON array of strings; NULL: none.

-- +goose Up
ALTER TABLE image_jobs ADD COLUMN warnings JSON;

-- +goose Down
ALTER TABLE image_jobs DROP COLUMN warnings;
